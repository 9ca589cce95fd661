package pipeline

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/internal/threadtest"
	"github.com/heterps/heterps/native"
)

// One stage on a shard in its own process (the client's Local path: no
// encoding, the gradients used in place, the dense values pulled ahead
// into reused buffers, the rows the step does not update pulled before its
// pushes land) trains bit for bit as single-process training (with two
// micro-batches, as the same worker that pulls every row after the
// update), and
// the pulls ahead rotate three sets of buffers (with the model's values)
// instead of allocating a set a step.
func TestLocalShardStageEqualsSingleProcessAndReusesBuffers(t *testing.T) {
	checkLeaks(t)
	const steps, size = 6, 6
	cfg := modelConfig(t, adamAdagrad)
	batch := func(step int64) *data.Batch { return testBatch(1, uint64(step), size) }
	_, refLosses := reference(t, cfg, steps, batch)
	train := func(w *Worker) []float64 {
		var losses []float64
		for step := int64(1); step <= steps; step++ {
			res, err := w.Step(context.Background(), step)
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, res.Loss)
		}
		return losses
	}
	// Two micro-batches do not sum exactly as one batch: compare with the
	// same worker that waits for the update to pull every row.
	twoMicro := func(sole bool) func(*Config) {
		return func(c *Config) { c.MicroBatches, c.SoleReplica = 2, sole }
	}
	early := train(localPSWorker(t, cfg, native.MustCPU(), steps, fixedBatches(batch), twoMicro(true)))
	waiting := train(localPSWorker(t, cfg, native.MustCPU(), steps, fixedBatches(batch), twoMicro(false)))
	if !slices.Equal(early, waiting) {
		t.Fatalf("2 micro-batches: losses %v pulling untouched rows early, %v waiting for the update", early, waiting)
	}
	w := localPSWorker(t, cfg, native.MustCPU(), steps, fixedBatches(batch))

	var losses []float64
	spare := map[int64]*float32{} // after each step, the buffer free for dense parameter 0
	for step := int64(1); step <= steps; step++ {
		res, err := w.Step(context.Background(), step)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, res.Loss)
		if len(w.spare) > 0 {
			spare[step] = unsafeData(w.spare[0])
		}
	}
	if !slices.Equal(losses, refLosses) {
		t.Fatalf("losses %v, single-process %v", losses, refLosses)
	}
	// The model's values, the buffers pulled into and the spare ones
	// rotate: the same three sets from step 2 on.
	for step := int64(2); step+3 <= steps; step++ {
		if spare[step] == nil || spare[step] != spare[step+3] {
			t.Fatalf("dense buffers after steps %d and %d: %p and %p, want the same reused buffer", step, step+3, spare[step], spare[step+3])
		}
	}
}

func unsafeData(s []float32) *float32 {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

// A sole replica's stage 0 pulls the next batch's rows that the current
// step does not update at the version before it (pullUntouched): they come
// at once though the step's update has not landed, hold the values of
// that version, and only the rows both batches use are left to pull.
func TestSoleReplicaPullsUntouchedRowsBeforeTheUpdate(t *testing.T) {
	checkLeaks(t)
	cfg := modelConfig(t, adamAdagrad)
	batch := func(step int64) *data.Batch { return testBatch(1, uint64(step), 6) }
	w := localPSWorker(t, cfg, native.MustCPU(), 4, fixedBatches(batch))
	if _, err := w.Step(context.Background(), 1); err != nil { // the servers are at version 1
		t.Fatal(err)
	}
	tables := w.copies[0].tables
	cur, err := planRows(batch(2), tables)
	if err != nil {
		t.Fatal(err)
	}
	next, err := planRows(batch(3), tables)
	if err != nil {
		t.Fatal(err)
	}
	touched := w.touchedRows(2, []input{{plan: cur}})
	if touched == nil {
		t.Fatal("no touched rows for a sole BSP replica")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for e, tb := range tables {
		// Step 3's rows, while step 2 has not even started: only the
		// untouched ones can be had, at version 1.
		a, err := w.pullUntouched(ctx, 3, tb, next.tables[e], touched[e])
		if err != nil {
			t.Fatalf("%s: %v", tb.table.Name, err)
		}
		dim, tp := tb.table.Cols, next.tables[e]
		late := 0
		for _, k := range tp.used {
			id := tp.ids[k]
			if _, hit := slices.BinarySearch(touched[e], id); hit {
				late++
				continue
			}
			want, _, err := w.cfg.PS.Pull(ctx, tb.table.Name, []int64{id}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a.table[int(k)*dim:int(k+1)*dim], want) {
				t.Fatalf("%s: row of id %d pulled early differs from version 1", tb.table.Name, id)
			}
		}
		if len(a.lateIDs) != late || late == len(tp.used) {
			t.Fatalf("%s: %d rows left to pull, want the %d of %d that both batches use", tb.table.Name, len(a.lateIDs), late, len(tp.used))
		}
	}
	for _, c := range []func(*Config){
		func(c *Config) { c.SoleReplica = false },
		func(c *Config) { c.Mode = ps.ASP },
	} {
		w := localPSWorker(t, cfg, native.MustCPU(), 4, fixedBatches(batch), c)
		if w.touchedRows(1, []input{{plan: cur}}) != nil {
			t.Error("rows pulled before the update for a replica that is not alone in BSP")
		}
	}
}

// localShardHook, if set, runs on every call a localPSWorker's client
// makes to its shard; set it before building the worker, reset it after
// the worker is closed.
var localShardHook func()

func localShardCalled() {
	if h := localShardHook; h != nil {
		h()
	}
}

// The same replica reads the next step's batch and pulls its rows in the
// step too: the next step's row pulls run on the step's goroutine or its
// side lane (or on goroutines either starts, one per table), and the next
// batch is read by the time the step returns.
func TestSoleLocalReplicaReadsAheadInTheStep(t *testing.T) {
	cfg := modelConfig(t, adamAdagrad)
	batch := func(step int64) *data.Batch { return testBatch(1, uint64(step), 6) }
	var mu sync.Mutex
	var pullers []string // per row pull ahead: the goroutine that asked for it
	localShardHook = func() {
		if stack := ownStack(); strings.Contains(stack, "pullUntouchedAhead") || strings.Contains(stack, "pullRestAhead") {
			mu.Lock()
			defer mu.Unlock()
			if g := askingGoroutine(stack); !onSideLane(g) { // the side lane is the step's
				pullers = append(pullers, g)
			}
		}
	}
	t.Cleanup(func() { localShardHook = nil })
	w := localPSWorker(t, cfg, native.MustCPU(), 0, fixedBatches(batch))
	defer w.Close()
	for step := int64(1); step <= 2; step++ {
		if _, err := w.Step(context.Background(), step); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	pullers = nil
	mu.Unlock()
	if _, err := w.Step(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	if w.next != 4 || len(w.prefetch) != 1 {
		t.Errorf("after step 3: reading ahead step %d, %d batches read; want step 4's read", w.next, len(w.prefetch))
	}
	mu.Lock()
	defer mu.Unlock()
	me := askingGoroutine(ownStack())
	if len(pullers) == 0 {
		t.Fatal("step 3 pulled no rows ahead for step 4")
	}
	for i, g := range pullers {
		if g != me {
			t.Errorf("row pull %d of %d for step 4 asked by goroutine %s; want the step's, %s", i+1, len(pullers), g, me)
		}
	}
}

// TestSoleLocalReplicaPushesTablesBesideTheSideLane: the in-line pushes of
// a sole local replica run outside the exclusion that keeps the backward
// pass's done calls apart (nn.Then), so the table push on the pass's own
// goroutine and a dense layer's push on the side lane run at once. The
// step's first push of each kind waits here for the other to start: were
// the pushes run inside the exclusion, the first would wait out its
// timeout.
func TestSoleLocalReplicaPushesTablesBesideTheSideLane(t *testing.T) {
	cfg := modelConfig(t, adamAdagrad)
	batch := func(step int64) *data.Batch { return testBatch(1, uint64(step), 6) }
	be, err := native.NewCPU(native.CPUOptions{Threads: 2}) // a side lane
	if err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	started := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var once [2]sync.Once
	var met [2]atomic.Bool
	meet := func(me, other int) { // 0: the table push, 1: a dense push
		once[me].Do(func() {
			close(started[me])
			select {
			case <-started[other]:
				met[me].Store(true)
			case <-time.After(5 * time.Second):
			}
		})
	}
	localShardHook = func() {
		if !armed.Load() {
			return
		}
		switch stack := ownStack(); {
		case strings.Contains(stack, "(*Client).PushRows"):
			meet(0, 1)
		case strings.Contains(stack, "(*Client).PushBlock"):
			meet(1, 0)
		}
	}
	t.Cleanup(func() { localShardHook = nil })
	w := localPSWorker(t, cfg, be, 0, fixedBatches(batch))
	defer w.Close()
	if _, err := w.Step(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if _, err := w.Step(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if !met[0].Load() || !met[1].Load() {
		t.Fatalf("the table push and a dense push did not run at once (each met the other: %v, %v)", met[0].Load(), met[1].Load())
	}
}

// TestSoleLocalReplicaReadsAheadOnTheSideLane: with a side lane, the
// step reads and plans the next batch on it (behind a dense layer's
// push) and pulls the rows the step does not touch, and the pass's own
// goroutine pulls the others once the tables are pushed.
func TestSoleLocalReplicaReadsAheadOnTheSideLane(t *testing.T) {
	cfg := modelConfig(t, adamAdagrad)
	be, err := native.NewCPU(native.CPUOptions{Threads: 2}) // a side lane
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	readBy := map[int64]string{} // step: the stack that read its batch
	batches := func(_ context.Context, step int64) (*data.Batch, error) {
		mu.Lock()
		defer mu.Unlock()
		readBy[step] = ownStack()
		return testBatch(1, uint64(step), 6), nil
	}
	var untouchedBy, restBy []string // who asked for step 3's row pulls, in step 2
	read := func(step int64) bool {
		mu.Lock()
		defer mu.Unlock()
		return readBy[step] != ""
	}
	// Step 2's table push waits for step 3's batch to be read: by the side
	// lane, or by nobody until the wait gives up.
	var armed atomic.Bool
	localShardHook = func() {
		if !armed.Load() {
			return
		}
		stack := ownStack()
		mu.Lock()
		switch {
		case strings.Contains(stack, "pullUntouchedAhead"):
			untouchedBy = append(untouchedBy, askingGoroutine(stack))
		case strings.Contains(stack, "pullRestAhead"):
			restBy = append(restBy, askingGoroutine(stack))
		}
		mu.Unlock()
		if strings.Contains(stack, "(*Client).PushRows") {
			for deadline := time.Now().Add(5 * time.Second); !read(3) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
	}
	t.Cleanup(func() { localShardHook = nil })
	w := localPSWorker(t, cfg, be, 0, batches)
	defer w.Close()
	for step := int64(1); step <= 2; step++ {
		armed.Store(step == 2)
		if _, err := w.Step(context.Background(), step); err != nil {
			t.Fatal(err)
		}
	}
	if w.next != 3 || len(w.prefetch) != 1 {
		t.Fatalf("after step 2: reading ahead step %d, %d batches read; want step 3's read", w.next, len(w.prefetch))
	}
	mu.Lock()
	defer mu.Unlock()
	if stack := readBy[3]; !strings.Contains(stack, "nn.(*lane).run") {
		t.Fatalf("step 3's batch was read off the side lane:\n%s", stack)
	}
	// The rows step 2 does not touch are pulled there too; the others by
	// the step's own goroutine, after its pushes.
	lane, me := askingGoroutine(readBy[3]), askingGoroutine(ownStack())
	if len(untouchedBy) == 0 || len(restBy) == 0 {
		t.Fatalf("step 2 pulled step 3's untouched rows %d times and the rest %d times; want both", len(untouchedBy), len(restBy))
	}
	for _, g := range untouchedBy {
		if g != lane {
			t.Errorf("an untouched row pull asked by goroutine %s; want the side lane, %s", g, lane)
		}
	}
	for _, g := range restBy {
		if g != me {
			t.Errorf("a late row pull asked by goroutine %s; want the step's, %s", g, me)
		}
	}
}

// askingGoroutine is the number of the goroutine whose stack this is or,
// for one that the pipeline's each started, of the one that started it.
func askingGoroutine(stack string) string {
	if _, by, ok := strings.Cut(stack, "created by github.com/heterps/heterps/daemon/pipeline.each in goroutine "); ok {
		return strings.Fields(by)[0]
	}
	return strings.Fields(stack)[1] // "goroutine N [running]:"
}

// onSideLane reports whether goroutine id runs a backward pass's side
// lane.
func onSideLane(id string) bool {
	stack, alive := threadtest.GoroutineStack(id)
	return alive && strings.Contains(stack, "nn.(*lane).run")
}

// ownStack is the calling goroutine's stack, its first 16 KiB.
func ownStack() string {
	buf := make([]byte, 16<<10)
	return string(buf[:runtime.Stack(buf, false)])
}

// A one-stage job's sole replica whose shards live in its own process runs
// its pushes in the step, as each layer's gradients become final: a slow
// shard lengthens its backward (Compute). A replica that is not alone
// pushes in the background, and the same shard lengthens only the wait
// for the pushes at the step's end (Push).
func TestSoleLocalReplicaPushesInTheStep(t *testing.T) {
	const slowCall = 200 * time.Millisecond
	cfg := modelConfig(t, adamAdagrad)
	batch := func(step int64) *data.Batch { return testBatch(1, uint64(step), 6) }
	var slow atomic.Bool
	localShardHook = func() {
		if slow.Load() {
			time.Sleep(slowCall)
		}
	}
	t.Cleanup(func() { localShardHook = nil })
	for _, sole := range []bool{true, false} {
		w := localPSWorker(t, cfg, native.MustCPU(), 0, fixedBatches(batch), func(c *Config) { c.SoleReplica = sole })
		for step := int64(1); step <= 2; step++ {
			if _, err := w.Step(context.Background(), step); err != nil {
				t.Fatal(err)
			}
		}
		slow.Store(true)
		res, err := w.Step(context.Background(), 3)
		slow.Store(false)
		if err != nil {
			t.Fatal(err)
		}
		if inStep := res.Compute >= slowCall; inStep != sole || (!sole && res.Push < slowCall) {
			t.Errorf("sole replica %v: compute %s, push wait %s with every shard call %s long; want the pushes in the step: %v",
				sole, res.Compute, res.Push, slowCall, sole)
		}
		w.Close()
	}
}
