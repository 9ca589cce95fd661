package pipeline

import (
	"fmt"

	"github.com/heterps/heterps/config"
)

// Schedules. A step runs each micro-batch's forward and backward once; the
// schedule orders them. Fill-drain (GPipe) runs every forward, then every
// backward, so a stage holds the forward state of all M micro-batches at
// once. 1F1B (PipeDream-Flush, Megatron's non-interleaved schedule) has
// stage i of S run min(S-i-1, M) warm-up forwards, then alternate one
// forward and one backward, then drain the remaining backwards: micro-batch
// m's backward can start once its gradient is back, which takes the S-i-1
// stages below one forward and backward each, so a stage holds at most
// min(S-i, M) micro-batches' forward state and reuses that many layer
// copies round-robin. The last stage runs each micro-batch's loss and
// backward right after its forward under either schedule (one copy).
//
// Lookahead. Under strict 1F1B a stage's backward of m waits for m's
// gradient, which leaves only when the stages below have each run m's
// forward and backward and passed it on: with one forward in hand the
// stage idles for every hop's latency, each micro-batch. Config.Lookahead
// L runs L more warm-up forwards, min(S-i-1+L, M), so the gradient it
// waits on has L forwards' time longer to arrive, for L more micro-batches
// of forward state held. On the 2-core Intel VM a 2-stage ctrdnn pipeline
// of 8 micro-batches at batch 512 ran 57-61k samples/s strict, 61-66k with
// L = 1 (6-8 % more in each of 4 rounds) and 60-63k under fill-drain,
// each run in a process of its own. The warm-ups still never grow from a
// stage to the one below it, which is all the order below relies on.
//
// Both run each micro-batch's backward in order 0..M-1 on the same inputs
// and keep each micro-batch's parameter gradients apart until the last
// backward, where they are combined weighted by n_m/n exactly as before:
// the step's result is bit-identical under either schedule.
//
// Deadlock freedom with bounded queues. A worker's compute waits only in
// receives: an activation from upstream (forward) or a gradient from
// downstream (backward); its sends go through the step's sender, which
// never holds up compute (its queue takes a step's sends: two a
// micro-batch, at most 2*MaxMicroBatches = 64). A send may wait for room in the receiver's
// queue (wire QueueBytes: at least one message always fits), that is for
// the receiver to take an earlier message of the same link, which it does
// when its compute reaches that receive. So the waits form a cycle only if
// the compute order of some stage could wait on a message that a later
// receive of its own makes possible. In 1F1B the last stage waits only for
// activations (its backward needs nothing from anyone). By induction from
// the last stage up, stage i's backward of m waits on stage i+1's
// backward of m, which waits only on messages stage i+1 has received or
// will receive from i in order up to m (sent before i's backward of m, as
// i ran forward m first) and on stage i+2's backward of m: every wait
// points at an earlier forward upstream or at a backward downstream of the
// same micro-batch, an order without cycles. A full queue only delays a
// sender until its receiver reaches the matching receive, which that
// order guarantees it does; one message per link in flight is enough
// (TestOneFOneBWithTinyQueues). Under 1F1B the gradients of a stage are
// taken from its queue as it goes rather than after all forwards, so they
// sit there for about a micro-batch's time, not a whole step's.

// Schedule orders a step's forwards and backwards on a stage.
type Schedule string

// The schedules.
const (
	// OneFOneB is 1F1B: warm-up forwards, then one forward and one
	// backward, then the remaining backwards. The default.
	OneFOneB Schedule = config.ScheduleOneFOneB
	// FillDrain is GPipe's: every forward, then every backward.
	FillDrain Schedule = config.ScheduleFillDrain
)

// ParseSchedule returns the schedule named s; "" is OneFOneB.
func ParseSchedule(s string) (Schedule, error) {
	switch Schedule(s) {
	case "", OneFOneB:
		return OneFOneB, nil
	case FillDrain:
		return FillDrain, nil
	}
	return "", fmt.Errorf("unknown schedule %q (want %q or %q)", s, OneFOneB, FillDrain)
}

// CheckLookahead refuses a lookahead outside [0, MaxMicroBatches]
// (Config.Lookahead).
func CheckLookahead(lookahead int) error {
	if lookahead < 0 || lookahead > MaxMicroBatches {
		return fmt.Errorf("lookahead %d, want 0 to %d", lookahead, MaxMicroBatches)
	}
	return nil
}

// warmup is how many forwards stage (of stages) runs before its first
// backward under s, with micros micro-batches a step and lookahead extra
// forwards under 1F1B. The last stage runs each backward with its forward
// and needs none.
func warmup(s Schedule, stage, stages, micros, lookahead int) int {
	switch {
	case stage == stages-1:
		return 0
	case s == FillDrain:
		return micros
	}
	return min(stages-stage-1+lookahead, micros)
}

// liveBound is the most micro-batches a stage holds the forward state of
// at once: the warm-up ones and the one in flight.
func liveBound(s Schedule, stage, stages, micros, lookahead int) int {
	return min(warmup(s, stage, stages, micros, lookahead)+1, micros)
}

// op is one step of a schedule: micro-batch m's forward or backward.
type op struct {
	m        int
	backward bool
}

// order is a stage's sequence of operations for a step of micros
// micro-batches after warm warm-up forwards. With warm 0 (the last stage)
// the backwards are left to the forwards, which run them.
func order(warm, micros int) []op {
	var ops []op
	for m := range micros {
		ops = append(ops, op{m: m})
		if warm > 0 && m >= warm {
			ops = append(ops, op{m: m - warm, backward: true})
		}
	}
	for m := max(micros-warm, 0); warm > 0 && m < micros; m++ {
		ops = append(ops, op{m: m, backward: true})
	}
	return ops
}

// runSchedule runs the step's forwards and backwards in the worker's order
// and returns the summed loss (last stage).
func (w *Worker) runSchedule(st *stepState, stage0 []input) (float64, error) {
	lossSum := 0.0
	for _, o := range order(w.warm, len(w.grads)) {
		if o.backward {
			if err := w.backwardFromDownstream(st, o.m); err != nil {
				return 0, err
			}
			continue
		}
		sum, err := w.forward(st, o.m, stage0)
		if err != nil {
			return 0, fmt.Errorf("micro-batch %d: %w", o.m, err)
		}
		lossSum += sum
	}
	return lossSum, nil
}

// acquire gives micro-batch m its layer copy (round-robin over the pool)
// and counts it live; the copy must be free, which the schedule's bound on
// live micro-batches ensures.
func (w *Worker) acquire(st *stepState, m int) (*modelCopy, error) {
	c := w.copies[m%len(w.copies)]
	if c.micro >= 0 {
		return nil, fmt.Errorf("layer copy %d still holds micro-batch %d's forward state (%d copies for a schedule of %d live)",
			m%len(w.copies), c.micro, len(w.copies), st.live+1)
	}
	c.micro = m
	st.live++
	st.res.PeakLive = max(st.res.PeakLive, st.live)
	return c, nil
}

// release frees micro-batch m's copy once its backward is done, first
// taking its sparse gradients out unless it is the step's last (whose
// gradients the pushes read from the copy while its backward runs on).
func (w *Worker) release(st *stepState, m int) error {
	c := w.grads[m].copy
	if m < len(w.grads)-1 {
		if err := w.grads[m].takeSparse(w.cfg.Backend); err != nil {
			return err
		}
	}
	c.micro = -1
	st.live--
	return nil
}
