//go:build cuda

package ctr

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/native"
)

// TestFCLayerAgainstCuBLAS times an FC layer's forward and backward
// through nn.FC on the GPU (GEMM, bias+ReLU, the fused backward of both,
// the weight- and input-gradient GEMMs) against the same three cuBLAS
// GEMMs called bare, at ctrdnn's layer shapes, and prints one JSON line
// per shape with the ratio (issue target: at most 1.15). Each side is the
// best of five rounds of 200 queued passes ended by one Sync, the two
// sides alternating so that clock changes hit both.
func TestFCLayerAgainstCuBLAS(t *testing.T) {
	b := cudaOrSkip(t)
	shapes := []struct{ rows, in, out int }{
		{512, 247, 512}, {512, 512, 256}, {512, 256, 128},
		{4096, 247, 512}, {4096, 512, 256}, {4096, 256, 128},
	}
	const rounds, passes = 5, 200
	best := func(pass func() error) float64 {
		d := time.Duration(1 << 62)
		for range rounds {
			d = min(d, timePasses(t, b, passes, pass))
		}
		return us(d) / passes
	}
	for _, c := range shapes {
		layer, gemms := fcPasses(t, b, c.rows, c.in, c.out)
		bestLayer, bestGemms := time.Duration(1<<62), time.Duration(1<<62)
		for range rounds {
			bestLayer = min(bestLayer, timePasses(t, b, passes, layer))
			bestGemms = min(bestGemms, timePasses(t, b, passes, gemms))
		}
		y, dz, db := b.Alloc(c.rows*c.out), b.Alloc(c.rows*c.out), b.Alloc(c.out)
		bias := b.Alloc(c.out)
		line, _ := json.Marshal(map[string]any{"fc": fmt.Sprintf("%dx%dx%d", c.rows, c.in, c.out),
			"layer_us": us(bestLayer) / passes, "cublas_us": us(bestGemms) / passes,
			"ratio":       float64(bestLayer) / float64(bestGemms),
			"bias_act_us": best(func() error { return b.BiasAct(native.ReLU, c.rows, c.out, y, bias, y) }),
			"bias_act_bwd_us": best(func() error {
				return b.BiasActBackward(native.ReLU, c.rows, c.out, y, dz, dz, db)
			})})
		fmt.Println(string(line))
	}
	// What one call costs when the GPU has nothing to do: the host's side
	// of a kernel launch and of a cuBLAS call, queued back to back.
	one, tiny := b.Alloc(1), [3]native.Buffer{b.Alloc(64), b.Alloc(64), b.Alloc(64)}
	line, _ := json.Marshal(map[string]any{"probe": "per call, queued",
		"fill_1_float_us": best(func() error { return b.Fill(one, 1) }),
		"gemm_8x8x8_us": best(func() error {
			return b.Gemm(false, false, 8, 8, 8, 1, tiny[0], 8, tiny[1], 8, 0, tiny[2], 8)
		})})
	fmt.Println(string(line))
}

// fcPasses returns one forward+backward of an FC layer [in x out] on a
// batch of rows, and the layer's three GEMMs alone on the same buffers.
func fcPasses(t *testing.T, b *native.CUDA, rows, in, out int) (layer, gemms func() error) {
	t.Helper()
	l, err := nn.NewFC(b, config.LayerShape{Name: "fc", Kind: "fc", In: in, Out: out}, "relu", 1)
	if err != nil {
		t.Fatal(err)
	}
	x, dy := deviceRand(t, b, rows*in, 2), deviceRand(t, b, rows*out, 3)
	y, dw, dx := b.Alloc(rows*out), b.Alloc(in*out), b.Alloc(rows*in)
	s := &nn.Step{Backend: b, Train: true}
	input := nn.Activation{Rows: rows, Parts: []nn.Part{{Buf: x, Width: in, NeedGrad: true}}}
	dout := nn.Activation{Rows: rows, Parts: []nn.Part{{Buf: dy, Width: out}}}
	layer = func() error {
		if _, err := l.Forward(s, input); err != nil {
			return err
		}
		_, err := l.Backward(s, dout)
		return err
	}
	w := l.W.Value
	gemms = func() error {
		if err := b.Gemm(false, false, rows, out, in, 1, x, in, w, out, 0, y, out); err != nil {
			return err
		}
		if err := b.Gemm(true, false, in, out, rows, 1, x, in, dy, out, 0, dw, out); err != nil {
			return err
		}
		return b.Gemm(false, true, rows, in, out, 1, dy, out, w, out, 0, dx, in)
	}
	return layer, gemms
}

// timePasses queues n passes, waits for the GPU, and returns the time.
func timePasses(t *testing.T, b *native.CUDA, n int, pass func() error) time.Duration {
	t.Helper()
	if err := pass(); err != nil { // first-use allocations stay out of the clock
		t.Fatal(err)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range n {
		if err := pass(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

func deviceRand(t *testing.T, b *native.CUDA, n int, seed uint64) native.Buffer {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	v := make([]float32, n)
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	buf := b.Alloc(n)
	if err := b.Upload(buf, v); err != nil {
		t.Fatal(err)
	}
	return buf
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
