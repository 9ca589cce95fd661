package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/heterps/heterps/daemon/alloc"
)

// trainTrace writes `heterps train --trace`: a line per step with the
// step's loss and wall time (the format of alloc.TraceLine). A nil
// trainTrace writes nothing.
type trainTrace struct {
	path  string
	f     *os.File
	w     *bufio.Writer
	enc   *json.Encoder
	units int
	start time.Time
	last  time.Time
}

func createTrace(path string, units int) (*trainTrace, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	now := time.Now()
	t := &trainTrace{path: path, f: f, w: bufio.NewWriter(f), units: units, start: now, last: now}
	t.enc = json.NewEncoder(t.w)
	return t, nil
}

// add records a step that has just ended with loss.
func (t *trainTrace) add(step int64, loss float64) error {
	if t == nil {
		return nil
	}
	now := time.Now()
	l := alloc.TraceLine{T: now.Sub(t.start).Seconds(), Step: step, Loss: loss, Units: t.units, StepSeconds: now.Sub(t.last).Seconds()}
	t.last = now
	if err := t.enc.Encode(l); err != nil {
		return fmt.Errorf("--trace %s: step %d: %w", t.path, step, err)
	}
	return nil
}

func (t *trainTrace) close() error {
	if t == nil {
		return nil
	}
	err := t.w.Flush()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--trace %s: %w", t.path, err)
	}
	return nil
}
