package nn

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// opaqueBuf is device-like memory: native.Host does not see through it, so
// layers must Download and Upload as they would on a GPU.
type opaqueBuf struct{ h native.HostBuffer }

func (b opaqueBuf) Len() int                         { return len(b.h) }
func (b opaqueBuf) Slice(from, to int) native.Buffer { return opaqueBuf{b.h[from:to:to]} }

// opaqueBackend runs the CPU kernels on opaqueBufs: the code paths a device
// backend takes, checked against the CPU without a device.
type opaqueBackend struct{ cpu *native.CPU }

var _ native.Backend = opaqueBackend{}

func un(b native.Buffer) native.Buffer {
	if o, ok := b.(opaqueBuf); ok {
		return o.h
	}
	return b
}

func (o opaqueBackend) Name() string              { return "opaque/" + o.cpu.Name() }
func (o opaqueBackend) Alloc(n int) native.Buffer { return opaqueBuf{make(native.HostBuffer, n)} }
func (o opaqueBackend) Upload(dst native.Buffer, src []float32) error {
	return o.cpu.Upload(un(dst), src)
}
func (o opaqueBackend) Download(dst []float32, src native.Buffer) error {
	return o.cpu.Download(dst, un(src))
}
func (o opaqueBackend) Copy(dst, src native.Buffer) error       { return o.cpu.Copy(un(dst), un(src)) }
func (o opaqueBackend) Fill(dst native.Buffer, v float32) error { return o.cpu.Fill(un(dst), v) }

func (o opaqueBackend) Gemm(ta, tb bool, m, n, k int, alpha float32, a native.Buffer, lda int, b native.Buffer, ldb int, beta float32, c native.Buffer, ldc int) error {
	return o.cpu.Gemm(ta, tb, m, n, k, alpha, un(a), lda, un(b), ldb, beta, un(c), ldc)
}

func (o opaqueBackend) BiasAct(act native.Act, rows, cols int, x, bias, y native.Buffer) error {
	return o.cpu.BiasAct(act, rows, cols, un(x), un(bias), un(y))
}

func (o opaqueBackend) BiasActBackward(act native.Act, rows, cols int, y, dy, dx, dbias native.Buffer) error {
	return o.cpu.BiasActBackward(act, rows, cols, un(y), un(dy), un(dx), un(dbias))
}

func (o opaqueBackend) EmbeddingBag(p native.Pool, table native.Buffer, rows, dim int, offsets, ids []int64, out native.Buffer) error {
	return o.cpu.EmbeddingBag(p, un(table), rows, dim, offsets, ids, un(out))
}

func (o opaqueBackend) EmbeddingBagBackward(p native.Pool, dim int, offsets, ids []int64, dout native.Buffer) (native.SparseRows, error) {
	g, err := o.cpu.EmbeddingBagBackward(p, dim, offsets, ids, un(dout))
	if err == nil {
		g.Rows = opaqueBuf{g.Rows.(native.HostBuffer)}
	}
	return g, err
}

func (o opaqueBackend) WeightedSum(out native.Buffer, w []float32, g []native.Buffer) error {
	gs := make([]native.Buffer, len(g))
	for i := range g {
		gs[i] = un(g[i])
	}
	return o.cpu.WeightedSum(un(out), w, gs)
}

func (o opaqueBackend) Update(opt native.Optim, w, g native.Buffer, state ...native.Buffer) error {
	return o.cpu.Update(opt, un(w), un(g), unAll(state)...)
}

func (o opaqueBackend) UpdateRows(opt native.Optim, table native.Buffer, tableRows, dim int, rows []int64, g native.Buffer, state ...native.Buffer) error {
	return o.cpu.UpdateRows(opt, un(table), tableRows, dim, rows, un(g), unAll(state)...)
}

func unAll(bs []native.Buffer) []native.Buffer {
	out := make([]native.Buffer, len(bs))
	for i, b := range bs {
		out[i] = un(b)
	}
	return out
}

func (o opaqueBackend) LSTMForward(batch, hidden int, z, bias, cPrev, gates, c, h native.Buffer) error {
	return o.cpu.LSTMForward(batch, hidden, un(z), un(bias), un(cPrev), un(gates), un(c), un(h))
}

func (o opaqueBackend) LSTMBackward(batch, hidden int, gates, cPrev, c, dh, dc, dz, dcPrev native.Buffer) error {
	return o.cpu.LSTMBackward(batch, hidden, un(gates), un(cPrev), un(c), un(dh), un(dc), un(dz), un(dcPrev))
}

func (o opaqueBackend) Softmax(rows, cols int, x, y native.Buffer, log bool) error {
	return o.cpu.Softmax(rows, cols, un(x), un(y), log)
}

func (o opaqueBackend) BCEWithLogits(n int, logits, labels native.Buffer) (float64, error) {
	return o.cpu.BCEWithLogits(n, un(logits), un(labels))
}

func (o opaqueBackend) BCEWithLogitsBackward(n int, logits, labels native.Buffer, scale float32, dx native.Buffer) error {
	return o.cpu.BCEWithLogitsBackward(n, un(logits), un(labels), scale, un(dx))
}

func (o opaqueBackend) SoftmaxCrossEntropy(rows, cols int, logits native.Buffer, labels []int64, scale float32, dx native.Buffer) (float64, error) {
	return o.cpu.SoftmaxCrossEntropy(rows, cols, un(logits), labels, scale, un(dx))
}

// gradsOf runs forward, loss and backward and returns the mean loss and
// every parameter's gradient (sparse ones densified by row id).
func gradsOf(t *testing.T, tr *Trainer, batch *data.Batch) (float64, map[string]map[int64][]float32) {
	t.Helper()
	loss, err := tr.Gradients(&Step{Backend: tr.Backend, Batch: batch, Train: true})
	if err != nil {
		t.Fatal(err)
	}
	grads := map[string]map[int64][]float32{}
	for _, p := range tr.Model.Params() {
		rows := map[int64][]float32{}
		if p.Sparse {
			h := make([]float32, p.SparseGrad.Rows.Len())
			if err := tr.Backend.Download(h, p.SparseGrad.Rows); err != nil {
				t.Fatal(err)
			}
			for k, id := range p.SparseGrad.IDs {
				rows[id] = h[k*p.Cols : (k+1)*p.Cols]
			}
		} else {
			h := make([]float32, p.Len())
			if err := tr.Backend.Download(h, p.Grad); err != nil {
				t.Fatal(err)
			}
			rows[0] = h
		}
		grads[p.Name] = rows
	}
	return loss, grads
}

// The matching and NCE models give the same loss and gradients on a
// device-like backend as on the CPU.
func TestDeviceLikeBackendMatchesCPU(t *testing.T) {
	cpu := native.MustCPU()
	for _, src := range []string{smallMatch, multiPartDot, smallNCE, multiPartNCE} {
		cfg := mustModel(t, src)
		onCPU, err := NewTrainer(cpu, cfg, 21, 0)
		if err != nil {
			t.Fatal(err)
		}
		onDevice, err := NewTrainer(opaqueBackend{cpu}, cfg, 21, 0)
		if err != nil {
			t.Fatal(err)
		}
		batch := testBatch(rand.New(rand.NewPCG(8, 8)), 9, cfg.Input.Slots, 0, cfg.Input.Vocab, cfg.Input.Classes)
		wantLoss, want := gradsOf(t, onCPU, batch)
		gotLoss, got := gradsOf(t, onDevice, batch)
		if math.Abs(gotLoss-wantLoss) > 1e-6*math.Abs(wantLoss) {
			t.Errorf("%s: loss %v on the device-like backend, %v on the CPU", cfg.Name, gotLoss, wantLoss)
		}
		for name, rows := range want {
			if len(got[name]) != len(rows) {
				t.Errorf("%s: %s has %d gradient rows, want %d", cfg.Name, name, len(got[name]), len(rows))
			}
			for id, w := range rows {
				if !slices.Equal(got[name][id], w) {
					t.Errorf("%s: %s row %d gradient %v, want %v", cfg.Name, name, id, got[name][id], w)
				}
			}
		}
	}
}
