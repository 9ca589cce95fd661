package alloc

import (
	"container/heap"
	"fmt"
	"math"
	"strings"
)

// Policy names an allocation policy.
type Policy string

const (
	Quality        Policy = "quality"
	MaxMin         Policy = "maxmin"
	Priority       Policy = "priority"
	Fair           Policy = "fair"
	QualityPerCost Policy = "quality-per-cost"
)

// Policies lists every policy, SLAQ's first.
func Policies() []Policy { return []Policy{Quality, MaxMin, Priority, Fair, QualityPerCost} }

// ParsePolicy checks a policy name.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies() {
		if string(p) == s {
			return p, nil
		}
	}
	names := make([]string, 0, 5)
	for _, p := range Policies() {
		names = append(names, string(p))
	}
	return "", fmt.Errorf("unknown allocation policy %q (want %s)", s, strings.Join(names, ", "))
}

// Job is what the allocator knows of one active job.
type Job struct {
	ID string
	// History is the job's (iteration, loss) record, oldest first; its first
	// point gives L_0 and its last the current iteration.
	History []Point
	// Curve, when set, is a fitted curve for History; otherwise Allocate fits
	// one, and a job with fewer than MinPoints points gets a prior (see prior).
	Curve    *Curve
	Step     StepModel
	UnitsNow int
	// Priority weighs gains under the priority policy; 0 means 1.
	Priority float64
	// Speed is this job's throughput per offered unit relative to the unit
	// Step was measured on (the HeterPS profile of the unit's type); 0 means 1.
	Speed float64
	// Price is the cost of one unit for this job; 0 means 1.
	Price float64
	// MaxUnits caps the job's units (its largest useful parallelism); 0: none.
	MaxUnits int
	// Remaining is the iterations the job has left; 0: unknown.
	Remaining float64
}

// Options tune Allocate.
type Options struct {
	Epoch float64 // seconds of the epoch being planned; 0 means 5
	Fit   FitOptions
}

// priorEpochs is how many single-unit epochs a job without a fitted curve is
// assumed to need to get 63 % of the way to its floor: a guess that lets new
// jobs compete for units before their history can be fitted.
const priorEpochs = 20

// Allocate divides units among jobs under policy p and returns each job's
// units, in the order of jobs. See the package documentation for the method.
func Allocate(p Policy, jobs []Job, units int, o Options) ([]int, error) {
	if _, err := ParsePolicy(string(p)); err != nil {
		return nil, err
	}
	if units < 0 {
		return nil, fmt.Errorf("allocate: %d units", units)
	}
	epoch := o.Epoch
	if epoch == 0 {
		epoch = 5
	}
	if !(epoch > 0) || math.IsInf(epoch, 0) {
		return nil, fmt.Errorf("allocate: epoch %v s: want positive and finite", epoch)
	}
	st := make([]jobState, len(jobs))
	for i := range jobs {
		s, err := newJobState(&jobs[i], epoch, o.Fit)
		if err != nil {
			return nil, fmt.Errorf("allocate: job %q: %w", jobs[i].ID, err)
		}
		st[i] = s
	}
	grant := make([]int, len(jobs))
	h := &grantHeap{policy: p, st: st, grant: grant}
	for i := range jobs {
		if units == 0 {
			break
		}
		grant[i], units = 1, units-1
		if st[i].canGrow(1) {
			h.items = append(h.items, i)
		}
	}
	h.keys = make([]float64, len(jobs))
	for _, i := range h.items {
		h.keys[i] = h.key(i)
	}
	heap.Init(h)
	for units > 0 && h.Len() > 0 {
		i := h.items[0]
		grant[i]++
		units--
		if st[i].canGrow(grant[i]) {
			h.keys[i] = h.key(i)
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
	}
	return grant, nil
}

// jobState is a job with the quantities every key needs.
type jobState struct {
	job      *Job
	curve    Curve
	kNow     float64
	speed    float64
	price    float64
	priority float64
	epoch    float64
}

func newJobState(j *Job, epoch float64, fo FitOptions) (jobState, error) {
	if len(j.History) == 0 {
		return jobState{}, fmt.Errorf("no loss history (want at least the first loss)")
	}
	s := jobState{job: j, kNow: j.History[len(j.History)-1].Iter, epoch: epoch,
		speed: orOne(j.Speed), price: orOne(j.Price), priority: orOne(j.Priority)}
	if j.Step.C < 0 || j.Step.O < 0 || j.Step.C+j.Step.O <= 0 {
		return jobState{}, fmt.Errorf("step model C=%v O=%v: want non-negative, not both 0", j.Step.C, j.Step.O)
	}
	switch {
	case j.Curve != nil:
		s.curve = *j.Curve
	case len(j.History) >= MinPoints:
		c, err := FitCurve(j.History, fo)
		if err != nil {
			s.curve = s.prior()
		} else {
			s.curve = c
		}
	default:
		s.curve = s.prior()
	}
	return s, nil
}

// prior is the curve assumed for a job too young to fit: an exponential from
// its first loss toward 0 that gets 63 % of the way after priorEpochs epochs
// on one unit.
func (s jobState) prior() Curve {
	l0 := s.job.History[0].Loss
	tau := priorEpochs * s.iters(1)
	return Curve{Family: Exponential, P: [4]float64{l0, 1 / tau, 0}, L0: l0}
}

func orOne(v float64) float64 {
	if v <= 0 {
		return 1
	}
	return v
}

// iters is the iterations the job runs in one epoch on u units.
func (s jobState) iters(u int) float64 {
	if u <= 0 {
		return 0
	}
	k := s.epoch / s.job.Step.Seconds(float64(u)*s.speed)
	if s.job.Remaining > 0 {
		k = math.Min(k, s.job.Remaining)
	}
	return k
}

// quality is the predicted normalised loss reduction at the end of the epoch
// on u units.
func (s jobState) quality(u int) float64 { return s.curve.Quality(s.kNow + s.iters(u)) }

func (s jobState) gain(u int) float64 { return s.quality(u+1) - s.quality(u) }

func (s jobState) canGrow(u int) bool { return s.job.MaxUnits <= 0 || u < s.job.MaxUnits }

// grantHeap is a max-heap of job indices by key, ties to more units now, then
// to the smaller ID.
type grantHeap struct {
	policy Policy
	st     []jobState
	grant  []int
	items  []int
	keys   []float64
}

func (h *grantHeap) key(i int) float64 {
	s, u := h.st[i], h.grant[i]
	switch h.policy {
	case MaxMin:
		return -s.quality(u)
	case Priority:
		return s.priority * s.gain(u)
	case Fair:
		return -float64(u)
	case QualityPerCost:
		return s.gain(u) / s.price
	}
	return s.gain(u)
}

func (h *grantHeap) Len() int { return len(h.items) }

func (h *grantHeap) Less(a, b int) bool {
	i, j := h.items[a], h.items[b]
	if h.keys[i] != h.keys[j] {
		return h.keys[i] > h.keys[j]
	}
	ji, jj := h.st[i].job, h.st[j].job
	if ji.UnitsNow != jj.UnitsNow {
		return ji.UnitsNow > jj.UnitsNow
	}
	return ji.ID < jj.ID
}

func (h *grantHeap) Swap(a, b int) { h.items[a], h.items[b] = h.items[b], h.items[a] }

func (h *grantHeap) Push(x any) { h.items = append(h.items, x.(int)) }

func (h *grantHeap) Pop() any {
	n := len(h.items) - 1
	x := h.items[n]
	h.items = h.items[:n]
	return x
}
