package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/heterps/heterps/bench/internal/loopback"
	"github.com/heterps/heterps/daemon/api"
)

// errTimeout is wrapped by waits that ran past their deadline.
var errTimeout = errors.New("deadline passed")

// pollEvery is how often the watcher asks the coordinator for the job.
const pollEvery = 100 * time.Millisecond

// sample is one answer of the coordinator about the job it runs now.
type sample struct {
	at time.Time
	s  api.JobStatus
}

// watcher polls a job, and the job that restarted it when it was
// restarted, recording every answer; polls that fail (the coordinator is
// down) are skipped.
type watcher struct {
	mu      sync.Mutex
	samples []sample
	done    chan struct{} // closed when the chain's last job is final
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// watch starts polling job id on c until its chain ends or stop is called.
func watch(ctx context.Context, c *loopback.Cluster, id string) *watcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{done: make(chan struct{}), stop: cancel}
	w.wg.Go(func() {
		defer close(w.done)
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		for {
			if s, err := c.Job(ctx, id); err == nil {
				w.mu.Lock()
				w.samples = append(w.samples, sample{at: time.Now(), s: s})
				w.mu.Unlock()
				switch {
				case s.RestartedAs != "":
					id = s.RestartedAs
					continue
				case s.State.Final():
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return w
}

// close stops polling and waits for the poller.
func (w *watcher) close() {
	w.stop()
	w.wg.Wait()
}

// last returns the newest sample; ok is false before the first.
func (w *watcher) last() (sample, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) == 0 {
		return sample{}, false
	}
	return w.samples[len(w.samples)-1], true
}

// history returns a copy of the samples so far.
func (w *watcher) history() []sample {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]sample(nil), w.samples...)
}

// waitFor waits until the newest sample satisfies ok, the chain ends, or
// the deadline passes.
func (w *watcher) waitFor(ctx context.Context, what string, timeout time.Duration, ok func(api.JobStatus) bool) (sample, error) {
	deadline := time.After(timeout)
	tick := time.NewTicker(pollEvery / 2)
	defer tick.Stop()
	for {
		if s, have := w.last(); have && ok(s.s) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return sample{}, ctx.Err()
		case <-deadline:
			s, _ := w.last()
			return sample{}, fmt.Errorf("waiting %v for %s: %w (last seen: job %s %s at step %d: %s)", timeout, what, errTimeout, s.s.ID, s.s.State, s.s.Step, s.s.Reason)
		case <-w.done:
			if s, have := w.last(); have && ok(s.s) {
				return s, nil
			}
			s, _ := w.last()
			return sample{}, fmt.Errorf("waiting for %s: job %s ended %s at step %d: %s", what, s.s.ID, s.s.State, s.s.Step, s.s.Reason)
		case <-tick.C:
			if s, have := w.last(); have && w.queuedFor(s.s.ID) > maxQueued {
				return sample{}, fmt.Errorf("waiting for %s: job %s has been queued for over %v: %s", what, s.s.ID, maxQueued, s.s.Reason)
			}
		}
	}
}

// maxQueued is how long a job may wait for units before the wait gives up:
// the cluster runs nothing else, so a job that waits longer waits forever.
const maxQueued = 20 * time.Second

// queuedFor returns how long job id has been queued without a break, as
// the samples show.
func (w *watcher) queuedFor(id string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var since time.Time
	for _, x := range w.samples {
		switch {
		case x.s.ID != id:
		case x.s.State != api.JobQueued:
			since = time.Time{}
		case since.IsZero():
			since = x.at
		}
	}
	if since.IsZero() || len(w.samples) == 0 {
		return 0
	}
	return w.samples[len(w.samples)-1].at.Sub(since)
}

// final waits for the chain's last job to be final and returns it.
func (w *watcher) final(ctx context.Context, timeout time.Duration) (api.JobStatus, error) {
	s, err := w.waitFor(ctx, "the job to finish", timeout, func(s api.JobStatus) bool { return s.State.Final() && s.RestartedAs == "" })
	return s.s, err
}

// resumed returns the first sample after fault in which training went on
// past where it was at the fault: the same job beyond stepAtFault, or the
// job restarting it beyond the step it was restored from.
func resumed(samples []sample, faultJob string, fault time.Time, stepAtFault int64) (sample, bool) {
	for _, x := range samples {
		if !x.at.After(fault) {
			continue
		}
		switch {
		case x.s.ID == faultJob && x.s.Step > stepAtFault:
			return x, true
		case x.s.ID != faultJob && x.s.Step > loopback.RestoredStep(x.s):
			return x, true
		}
	}
	return sample{}, false
}

// stalledAt is the step a job's progress stopped at after a fault: node
// reports come once a heartbeat, so the step the API showed at the fault
// lags the replicas' by up to one; the highest step it shows within the
// window after the fault is where they really were.
func stalledAt(samples []sample, job string, fault time.Time, step int64, window time.Duration) int64 {
	for _, x := range samples {
		if x.s.ID == job && x.at.After(fault) && !x.at.After(fault.Add(window)) {
			step = max(step, x.s.Step)
		}
	}
	return step
}
