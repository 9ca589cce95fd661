package nn

import (
	"fmt"
	"time"

	"github.com/heterps/heterps/native"
)

// LayerTime is one layer's measured cost at one batch size.
type LayerTime struct {
	Name     string
	Kind     string
	Forward  time.Duration
	Backward time.Duration
	OutWidth int // floats per sample of the layer's output
}

// ProfileLayers runs forward, loss and backward reps times on s.Batch and
// returns, per layer, the fastest forward and backward time seen. The model
// must be single-tower (profiles of tower models need per-tower stages).
// On a backend that queues its work (native.Sync), each timed layer is
// waited for before its clock stops and the work before it before its
// clock starts, so a time is the layer's and not the launch's.
func (m *Model) ProfileLayers(s *Step, reps int) ([]LayerTime, error) {
	if len(m.towers) > 0 {
		return nil, fmt.Errorf("profile: model %s has towers; only single-tower models can be profiled layer by layer", m.Config.Name)
	}
	times := make([]LayerTime, len(m.entries))
	for i, e := range m.entries {
		sh := e.layer.Shape()
		times[i] = LayerTime{Name: sh.Name, Kind: sh.Kind, Forward: time.Duration(1 << 62), Backward: time.Duration(1 << 62), OutWidth: sh.Out}
	}
	for range max(reps, 1) {
		if err := m.profileOnce(s, times); err != nil {
			return nil, err
		}
	}
	return times, nil
}

func (m *Model) profileOnce(s *Step, times []LayerTime) error {
	act := Activation{Rows: s.Batch.Size}
	for i, e := range m.entries {
		start, err := settled(s)
		if err != nil {
			return err
		}
		out, err := e.layer.Forward(s, act)
		if err != nil {
			return err
		}
		took, err := since(s, start)
		if err != nil {
			return err
		}
		times[i].Forward = min(times[i].Forward, took)
		act = out
	}
	_, grad, err := m.Loss.Forward(s, act)
	if err != nil {
		return err
	}
	for i := len(m.entries) - 1; i >= 0; i-- {
		start, err := settled(s)
		if err != nil {
			return err
		}
		din, err := m.entries[i].layer.Backward(s, grad)
		if err != nil {
			return err
		}
		took, err := since(s, start)
		if err != nil {
			return err
		}
		times[i].Backward = min(times[i].Backward, took)
		grad = din
	}
	return nil
}

// settled waits for the backend's queued work, if it queues any, and
// returns the time then.
func settled(s *Step) (time.Time, error) {
	if err := native.Sync(s.Backend); err != nil {
		return time.Time{}, fmt.Errorf("profile: backend sync: %w", err)
	}
	return time.Now(), nil
}

// since is the time from start until the backend's queued work is done.
func since(s *Step, start time.Time) (time.Duration, error) {
	end, err := settled(s)
	return end.Sub(start), err
}
