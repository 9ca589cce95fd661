package coord

import (
	"fmt"
	"runtime/debug"
)

// Containment. Planning a job runs code the job's own files drive (its
// model, its catalog types, its scheduling method, the profiles and
// checkpoints it names) on the coordinator's background loops. A panic
// there would end the coordinator, and its state database would bring the
// job back to the queue at the next start, where the panic would end it
// again: one job would keep the whole cluster down. So the functions that
// plan, price or fit a job turn a panic of their own into an error naming
// the job (the job fails, or the re-plan, move or fit is skipped, as for
// any other error of theirs), with the stack in the log. They hold no lock
// of their own, so nothing stays locked behind the panic.

// recoverInto is deferred by such a function, whose error result err is:
// a panic becomes *err, logged with its stack, for job id.
func (c *Coordinator) recoverInto(err *error, id, what string) {
	p := recover()
	if p == nil {
		return
	}
	c.log.Error(what+" panicked: a bug in heterps; the job's "+what+" fails, the coordinator goes on",
		"job", id, "panic", p, "stack", string(debug.Stack()))
	*err = fmt.Errorf("internal error in %s: %v (a bug in heterps; the coordinator's log has the stack)", what, p)
}
