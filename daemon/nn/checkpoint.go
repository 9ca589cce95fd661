package nn

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/heterps/heterps/daemon/ckpt"
	"github.com/heterps/heterps/native"
)

// Checkpoint metadata keys beside ckpt's model and step.
const (
	keySeed      = "heterps.seed"
	keyOptimizer = "heterps.optimizer"
	keySparseOpt = "heterps.sparse_optimizer"
)

// Save writes every parameter and its optimiser state, with the model
// name, step and optimiser settings, to path atomically (safetensors).
func (t *Trainer) Save(path string) error {
	meta := ckpt.NewMetadata(t.Model.Config.Name, t.Opt.Step)
	for k, v := range t.Meta {
		if _, own := meta[k]; !own {
			meta[k] = v
		}
	}
	meta[keySeed] = strconv.FormatUint(t.Model.Seed, 10)
	meta[keyOptimizer] = fmt.Sprintf("%+v", t.Opt.Dense)
	meta[keySparseOpt] = fmt.Sprintf("%+v", t.Opt.Sparse)
	var tensors []ckpt.Tensor
	for _, p := range t.Model.Params() {
		bufs := append([]native.Buffer{p.Value}, p.State...)
		for i, buf := range bufs {
			h, err := hostFloats(t.Backend, buf)
			if err != nil {
				return fmt.Errorf("checkpoint %s: %s: %w", path, p.Name, err)
			}
			tensors = append(tensors, ckpt.Float32(stateName(p.Name, i), []int64{int64(p.Rows), int64(p.Cols)}, h))
		}
	}
	meta, err := ckpt.WithPayloadSHA256(meta, tensors)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if _, err := ckpt.WriteFile(path, meta, tensors); err != nil {
		return err
	}
	return nil
}

// stateName names a parameter's value (i = 0) or its i-th optimiser state.
func stateName(param string, i int) string {
	if i == 0 {
		return param
	}
	return fmt.Sprintf("%s.opt%d", param, i-1)
}

// Load restores parameters, optimiser state and the step counter from a
// checkpoint written by Save for the same model. The file is checked
// before anything is changed: a checkpoint of another model, a missing
// tensor, a wrong shape or a payload whose SHA-256 differs from the one
// Save recorded (ckpt.ErrChecksum) leaves the trainer as it was. A file
// written before checksums loads, with a warning on slog's default logger.
func (t *Trainer) Load(path string) error {
	f, err := ckpt.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.CheckPayload(); errors.Is(err, ckpt.ErrNoChecksum) {
		slog.Warn("loading a checkpoint without a payload checksum: corruption cannot be detected", "file", path)
	} else if err != nil {
		return err
	}
	if err := f.CheckModel(t.Model.Config.Name); err != nil {
		return err
	}
	step, err := f.Step()
	if err != nil {
		return err
	}
	states := NativeOptim(t.Opt.Dense, 1, 0).StateBuffers()
	sparseStates := NativeOptim(t.Opt.Sparse, 1, 0).StateBuffers()
	params := t.Model.Params()
	for _, p := range params {
		n := states
		if p.Sparse {
			n = sparseStates
		}
		for i := 0; i <= n; i++ {
			if err := checkTensor(f, stateName(p.Name, i), p); err != nil {
				return err
			}
		}
	}
	for _, p := range params {
		if err := t.loadParam(f, p, states, sparseStates); err != nil {
			return err
		}
	}
	t.Opt.Step = step
	return nil
}

func checkTensor(f *ckpt.File, name string, p *Param) error {
	info, ok := f.Tensor(name)
	if !ok {
		return fmt.Errorf("checkpoint %s: no tensor %q (saved with other optimiser settings?)", f.Name(), name)
	}
	if len(info.Shape) != 2 || info.Shape[0] != int64(p.Rows) || info.Shape[1] != int64(p.Cols) {
		return fmt.Errorf("checkpoint %s: tensor %q has shape %v, the model needs [%d %d]", f.Name(), name, info.Shape, p.Rows, p.Cols)
	}
	return nil
}

func (t *Trainer) loadParam(f *ckpt.File, p *Param, states, sparseStates int) error {
	n := states
	if p.Sparse {
		n = sparseStates
	}
	if len(p.State) != n {
		p.State = make([]native.Buffer, n)
		for i := range p.State {
			p.State[i] = t.Backend.Alloc(p.Len())
		}
	}
	bufs := append([]native.Buffer{p.Value}, p.State...)
	host := make([]float32, p.Len())
	for i, buf := range bufs {
		if err := f.ReadFloat32(stateName(p.Name, i), host); err != nil {
			return err
		}
		if err := t.Backend.Upload(buf, host); err != nil {
			return err
		}
	}
	return nil
}
