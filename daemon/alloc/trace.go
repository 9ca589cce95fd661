package alloc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// TraceLine is one line of a job's trace, a JSON-lines record of a real
// run (`heterps train --trace`, a job file's trace): seconds since the job
// started, the step, its loss, the units the job held and the measured
// seconds per step since the previous line (0 when not measured).
type TraceLine struct {
	T           float64 `json:"t"`
	Step        int64   `json:"step"`
	Loss        float64 `json:"loss"`
	Units       int     `json:"units"`
	StepSeconds float64 `json:"step_s"`
}

// maxTraceLine bounds one line of a trace file.
const maxTraceLine = 1 << 16

// ReadTrace reads a trace; name labels its errors. Lines must have
// increasing steps and finite losses.
func ReadTrace(name string, r io.Reader) ([]TraceLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxTraceLine)
	var out []TraceLine
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l TraceLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		switch {
		case math.IsNaN(l.Loss) || math.IsInf(l.Loss, 0):
			return nil, fmt.Errorf("%s:%d: loss %v: want finite", name, n, l.Loss)
		case len(out) > 0 && l.Step <= out[len(out)-1].Step:
			return nil, fmt.Errorf("%s:%d: step %d after step %d: want increasing", name, n, l.Step, out[len(out)-1].Step)
		case l.Units < 0 || l.StepSeconds < 0 || math.IsNaN(l.StepSeconds) || math.IsInf(l.StepSeconds, 0):
			return nil, fmt.Errorf("%s:%d: units %d, step_s %v: want non-negative and finite", name, n, l.Units, l.StepSeconds)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
