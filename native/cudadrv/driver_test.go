//go:build cuda

package cudadrv

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

// deviceOrSkip returns device 0's primary context, or skips the test when
// this machine has no driver or no GPU.
func deviceOrSkip(t *testing.T) *Context {
	t.Helper()
	if err := Init(); err != nil {
		if errors.Is(err, ErrNoDriver) || errors.Is(err, ErrNoDevice) {
			t.Skipf("no CUDA device: %v", err)
		}
		t.Fatalf("Init: %v", err)
	}
	d, err := GetDevice(0)
	if err != nil {
		t.Fatalf("GetDevice(0): %v", err)
	}
	c, err := d.PrimaryContext()
	if err != nil {
		t.Fatalf("PrimaryContext: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDriverInitSaysWhy runs everywhere: Init either succeeds (and the
// devices describe themselves) or fails with ErrNoDriver/ErrNoDevice and a
// reason, never with a crash or an exit as gorgonia.org/cu's init does.
func TestDriverInitSaysWhy(t *testing.T) {
	err := Init()
	if err != nil {
		if !errors.Is(err, ErrNoDriver) && !errors.Is(err, ErrNoDevice) {
			t.Fatalf("Init: %v wraps neither ErrNoDriver nor ErrNoDevice", err)
		}
		if !strings.Contains(err.Error(), ":") {
			t.Fatalf("Init error %q gives no reason", err)
		}
		if _, err2 := Devices(); !errors.Is(err2, err) && err2.Error() != err.Error() {
			t.Fatalf("Devices after a failed Init: %v, want Init's error %v", err2, err)
		}
		t.Logf("no GPU here, as reported: %v", err)
		return
	}
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.Name == "" || d.TotalMem <= 0 || d.Multiprocessors <= 0 || d.CCMajor < 3 {
			t.Errorf("implausible device %+v", d)
		}
		if len(d.UUID) != len("GPU-")+36 || !strings.HasPrefix(d.UUID, "GPU-") || d.UUID == FormatUUID([16]byte{}) {
			t.Errorf("device %d: uuid %q, want nvidia-smi's GPU-xxxxxxxx-... and not all zeros", d.Ordinal, d.UUID)
		}
		t.Logf("device %d: %v", d.Ordinal, d)
	}
}

func TestDriverResultMeansNoDevice(t *testing.T) {
	for _, r := range []Result{NoDevice, InvalidDevice, InsufficientDrv} {
		if !errors.Is(r, ErrNoDevice) {
			t.Errorf("Result %d does not match ErrNoDevice", int(r))
		}
	}
	for _, r := range []Result{InvalidValue, OutOfMemory, LaunchFailed} {
		if errors.Is(r, ErrNoDevice) {
			t.Errorf("Result %d matches ErrNoDevice", int(r))
		}
		if r.Error() == "" {
			t.Errorf("Result %d has an empty message", int(r))
		}
	}
}

func TestDriverPackArgs(t *testing.T) {
	got, err := packArgs([]any{DevicePtr(0x1122334455667788), int32(-2), uint32(7), int64(-3), uint64(9),
		float32(1.5), float64(-2.25)})
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	checks := []struct {
		name string
		ok   bool
	}{
		{"DevicePtr", le.Uint64(got[0:]) == 0x1122334455667788},
		{"int32", int32(le.Uint32(got[8:])) == -2},
		{"uint32", le.Uint32(got[16:]) == 7},
		{"int64", int64(le.Uint64(got[24:])) == -3},
		{"uint64", le.Uint64(got[32:]) == 9},
		{"float32", math.Float32frombits(le.Uint32(got[40:])) == 1.5},
		{"float64", math.Float64frombits(le.Uint64(got[48:])) == -2.25},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s slot holds the wrong bytes: % x", c.name, got)
		}
	}
	if _, err := packArgs([]any{1}); !errors.Is(err, InvalidValue) {
		t.Errorf("plain int: %v, want InvalidValue", err)
	}
}

// probePTX fills out[0..n) with v (PTX 7.0 for sm_80, which the driver
// compiles for any newer GPU; checked with ptxas for sm_80 and sm_90).
const probePTX = `.version 7.0
.target sm_80
.address_size 64

.visible .entry hps_probe_fill(
	.param .u64 p_out,
	.param .f32 p_v,
	.param .u32 p_n
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .f32 %f<2>;
	.reg .b64 %rd<5>;

	ld.param.u64 %rd1, [p_out];
	ld.param.f32 %f1, [p_v];
	ld.param.u32 %r2, [p_n];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r1, %r3, %r4, %r5;
	setp.ge.u32 %p1, %r1, %r2;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r1, 4;
	add.s64 %rd4, %rd2, %rd3;
	st.global.f32 [%rd4], %f1;
DONE:
	ret;
}
`

func TestDriverModuleLaunch(t *testing.T) {
	c := deviceOrSkip(t)
	mod, err := c.LoadModule([]byte(probePTX))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	fn, err := mod.Function("hps_probe_fill")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mod.Function("no_such_kernel"); !errors.Is(err, NotFound) {
		t.Errorf("missing kernel: %v, want NotFound", err)
	}
	const n = 1000 // not a multiple of the block
	p, err := c.MemAlloc(4 * (n + 1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(p)
	if err := c.CopyHtoD(p, make([]byte, 4*(n+1))); err != nil {
		t.Fatal(err)
	}
	if err := fn.Launch(Dim3{X: (n + 127) / 128}, Dim3{X: 128}, 0, 0, p, float32(2.5), uint32(n)); err != nil {
		t.Fatal(err)
	}
	if err := c.Synchronize(); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4*(n+1))
	if err := c.CopyDtoH(out, p); err != nil {
		t.Fatal(err)
	}
	for i := range n + 1 {
		want := float32(2.5)
		if i == n {
			want = 0 // past n: untouched
		}
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])); got != want {
			t.Fatalf("out[%d] = %g, want %g", i, got, want)
		}
	}
}

func TestDriverContextDoAndClose(t *testing.T) {
	c := deviceOrSkip(t)
	ran := false
	if err := c.Do(func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Do: ran=%v err=%v", ran, err)
	}
	want := errors.New("from f")
	if err := c.Do(func() error { return want }); err != want {
		t.Fatalf("Do returned %v, want f's error", err)
	}
	if free, total, err := c.MemInfo(); err != nil || free <= 0 || total < free {
		t.Fatalf("MemInfo: free=%d total=%d err=%v", free, total, err)
	}
	c.Close()
	if err := c.Do(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
	if err := c.Bind(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Bind after Close: %v, want ErrClosed", err)
	}
}
