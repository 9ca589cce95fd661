package node

import (
	"context"
	"sync"

	"github.com/heterps/heterps/daemon/api"
)

// Checkpoints asked for while a job runs. The user asks the coordinator
// (POST /v1/jobs/{id}/checkpoint), which picks a step a little ahead of
// the stage replicas and sets it on the job's PS tasks
// (api.Task.CheckpointAt); the checkpoint loop of each node hosting
// shards of the job then takes that step as it takes the periodic ones.
// A step training passed before the node heard of it is reported as a
// failed checkpoint of that step, and the coordinator asks again, later.

// asks carries the latest step asked for from the updates of a job's PS
// tasks on this node to the job's checkpoint loop here.
type asks struct {
	mu   sync.Mutex
	step int64
	note chan struct{} // holds one wake-up when an ask came
}

func newAsks(step int64) *asks { return &asks{step: step, note: make(chan struct{}, 1)} }

// ask records step if it is later than the latest and wakes the loop;
// it reports whether it did.
func (k *asks) ask(step int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if step <= k.step {
		return false
	}
	k.step = step
	select {
	case k.note <- struct{}{}:
	default:
	}
	return true
}

// latest is the latest step asked for (0: none).
func (k *asks) latest() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.step
}

// newerAsk reports whether spec asks t, a running PS task, for a later
// checkpoint than it has heard of.
func newerAsk(t *task, spec api.Task) bool {
	return t.asks != nil && spec.CheckpointAt > t.asks.latest()
}

// noteAsked hands the checkpoint spec asks for to the job's checkpoint
// loop, when it is new.
func (a *Agent) noteAsked(t *task, spec api.Task) {
	if spec.CheckpointAt > t.spec.Steps {
		a.taskLog(t.spec).Warn("checkpoint asked for past the job's last step; ignored", "step", spec.CheckpointAt, "steps", t.spec.Steps)
		return
	}
	if spec.Role == api.RolePS && t.asks != nil && t.asks.ask(spec.CheckpointAt) {
		a.taskLog(t.spec).Info("checkpoint asked for", "step", spec.CheckpointAt)
	}
}

// checkpointPlan says which step a job's checkpoint loop takes next: the
// next periodic one (every CheckpointEvery steps, and the last) or the
// step asked for, whichever comes first, after done.
type checkpointPlan struct {
	every, steps int64
	done         int64 // the last step taken or given up
}

// next returns the next step due, whether it is the one asked for
// (asked, the latest ask), and 0 when nothing is due until an ask comes.
func (p checkpointPlan) next(asked int64) (step int64, isAsked bool) {
	if p.every > 0 {
		step = min((p.done/p.every+1)*p.every, p.steps)
	}
	if asked > p.done && (step == 0 || asked < step) {
		return asked, true
	}
	return step, step != 0 && step == asked
}

// untilAsked returns a context of ctx that also ends when an ask for a
// step before step comes (one after done), and the func that releases it
// and reports whether such an ask ended it: the loop then takes the
// earlier step first.
func untilAsked(ctx context.Context, k *asks, done, step int64) (context.Context, func() (cut bool)) {
	wctx, cancel := context.WithCancel(ctx)
	stopped := make(chan bool, 1)
	go func() {
		for {
			select {
			case <-wctx.Done():
				stopped <- false
				return
			case <-k.note:
				if s := k.latest(); s > done && s < step {
					cancel()
					stopped <- true
					return
				}
			}
		}
	}()
	return wctx, func() bool { cancel(); return <-stopped }
}
