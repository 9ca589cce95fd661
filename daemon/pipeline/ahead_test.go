package pipeline

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/native"
)

// notSole makes a worker one replica among several of its stage.
func notSole(c *Config) { c.SoleReplica = false }

// A BSP replica among several asks for the next batch's rows before its
// own table pushes are in (asksBeforePushing): with its gate still shut,
// the pull is answered as soon as the servers apply the step, with that
// version's rows.
func TestReplicaAmongSeveralAsksForTheNextRowsBeforeItsPushes(t *testing.T) {
	checkLeaks(t)
	w, ins := nextRowsWorker(t, notSole)
	g := newGate(1)
	defer g.open(true)
	done := make(chan struct{})
	go func() {
		w.pullRowsAhead(g, 2, ins, nil)
		close(done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tb := range w.copies[0].tables { // step 1's update, pushed by another replica
		ids := []int64{ins[0].plan.tables[0].ids[0]}
		if err := w.cfg.PS.PushRows(ctx, tb.table.Name, 1, 1, ids, make([]float32, tb.table.Cols), tb.table.Cols); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the next rows came only once the replica's own pushes were in")
	}
	for e, tb := range w.copies[0].tables {
		tp := ins[0].plan.tables[e]
		want, err := w.fetchTable(ctx, 2, tb, tp)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ins[0].tables[e], want) {
			t.Fatalf("%s: rows pulled early differ from version 1's", tb.table.Name)
		}
	}
}

// A step that fails shuts its gate not ok: the rows asked for early wait
// for a version that may never come, so the pull is cancelled at once and
// the next step pulls them itself.
func TestAFailedStepCancelsTheRowsAskedForEarly(t *testing.T) {
	checkLeaks(t)
	w, ins := nextRowsWorker(t, notSole)
	g := newGate(1)
	done := make(chan struct{})
	go func() {
		w.pullRowsAhead(g, 2, ins, nil)
		close(done)
	}()
	g.open(false)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the pull asked for early still waits after its step failed")
	}
	if ins[0].tables != nil {
		t.Fatal("rows left from a cancelled pull")
	}
}

// A sole replica, or one in ASP, keeps waiting for its pushes: the gate
// decides.
func TestOnlyBSPReplicasAmongSeveralAskEarly(t *testing.T) {
	g := newGate(1)
	defer g.open(true)
	for name, c := range map[string]func(*Config){"sole": func(*Config) {}, "ASP": func(c *Config) { notSole(c); c.Mode = ps.ASP }} {
		w, ins := nextRowsWorker(t, c)
		if w.asksBeforePushing(g, len(ins)) {
			t.Errorf("%s replica asks for the next rows before its pushes", name)
		}
	}
	w, ins := nextRowsWorker(t, notSole)
	if !w.asksBeforePushing(g, len(ins)) {
		t.Error("a BSP replica among several waits for its pushes")
	}
	if w.asksBeforePushing(g, w.cfg.PS.Lanes()) {
		t.Error("asks early with more waiting pulls than the client has lanes")
	}
}

// nextRowsWorker is a worker on a local shard at version 0 and the planned
// micro-batches of its step 2.
func nextRowsWorker(t *testing.T, configure func(*Config)) (*Worker, []input) {
	t.Helper()
	cfg := modelConfig(t, adamAdagrad)
	batch := func(step int64) *data.Batch { return testBatch(1, uint64(step), 6) }
	w := localPSWorker(t, cfg, native.MustCPU(), 4, fixedBatches(batch), configure)
	ins, err := w.microInputs(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	return w, ins
}
