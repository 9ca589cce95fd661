package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heterps/heterps/daemon/alloc"
)

func init() {
	register("sim", "simulate many jobs sharing a cluster under an allocation policy (SLAQ)", func(args []string) int {
		return runSim(args, os.Stdout, os.Stderr)
	})
}

// simFlags are the options of `heterps sim`.
type simFlags struct {
	simConfig
	policy string
	json   bool
	plot   string // PNG of average quality over time per policy
	sweep  []int  // core counts of a contention sweep
}

// simConfig is one simulation's input.
type simConfig struct {
	Jobs        int
	Cores       int
	ArrivalMean float64 // seconds between arrivals, mean of an exponential
	Epoch       float64 // seconds between allocation decisions
	Seed        uint64
	RefitEvery  int // epochs between refits of a job's loss curve
	MaxUnits    int // when > 0, every job's largest useful parallelism
	// kinds are the job kinds drawn from (simKinds when empty); schedule,
	// when set, is the exact jobs to run (sim_trace.go).
	kinds    []jobKind
	schedule []scheduled
	traceDir string
}

// scheduled is a job of a replayed schedule.
type scheduled struct {
	kind     *jobKind
	arrival  float64
	priority float64
}

// maxSimCores and maxSimJobs bound a simulation. A job costs the
// simulator about 30 ms (1,000 jobs on 64 cores under fair: 32 s on the
// 2-core Zen 5 VM, 10,000: 331 s): 100,000 is most of an hour, and a
// larger count would run for days without a word.
const (
	maxSimCores = 10000
	maxSimJobs  = 100000
)

func parseSimFlags(args []string, stderr io.Writer) (*simFlags, error) {
	f := &simFlags{}
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&f.Jobs, "jobs", 100, "jobs to simulate, 1 to 100000 (about 30 ms each)")
	fs.IntVar(&f.Cores, "cores", 64, fmt.Sprintf("cores of the cluster (at most %d)", maxSimCores))
	fs.Float64Var(&f.ArrivalMean, "arrival-mean", 15, "mean seconds between job arrivals (Poisson)")
	fs.Float64Var(&f.Epoch, "epoch", 5, "seconds between allocation decisions")
	fs.Uint64Var(&f.Seed, "seed", 1, "seed of arrivals, job kinds and loss noise")
	fs.IntVar(&f.RefitEvery, "refit-every", 4, "epochs between refits of a job's loss curve")
	fs.IntVar(&f.MaxUnits, "max-units", 0, "when > 0, the most units any job can use (else each kind's own)")
	fs.StringVar(&f.traceDir, "trace-dir", "", "job kinds from the traces (*.jsonl) of real runs in this directory, replaying its arrivals.json if any, instead of the synthetic curves")
	names := []string{"all"}
	for _, p := range alloc.Policies() {
		names = append(names, string(p))
	}
	fs.StringVar(&f.policy, "policy", string(alloc.Quality), "allocation policy: "+strings.Join(names, ", "))
	fs.BoolVar(&f.json, "json", false, "print the result as JSON (with --policy all, an array)")
	fs.StringVar(&f.plot, "plot", "", "also draw the mean quality of the running jobs over time, per policy, to this PNG file")
	sweep := fs.String("sweep-cores", "", "instead: compare quality with fair at each of these core counts (e.g. 16,32,64,128) and say where the gain vanishes")
	err := fs.Parse(args)
	if err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if f.policy != "all" {
		if _, err := alloc.ParsePolicy(f.policy); err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
	}
	if f.traceDir != "" {
		if err := f.useTraces(f.traceDir); err != nil {
			return nil, err
		}
	}
	if *sweep != "" {
		if f.sweep, err = parseCores(*sweep); err != nil {
			return nil, err
		}
	}
	return f, f.simConfig.check()
}

func (c simConfig) check() error {
	switch {
	case c.Jobs < 1 || c.Jobs > maxSimJobs:
		return fmt.Errorf("--jobs %d: want 1 to %d (the simulator takes about 30 ms a job)", c.Jobs, maxSimJobs)
	case c.Cores < 1 || c.Cores > maxSimCores:
		return fmt.Errorf("--cores %d: want 1 to %d", c.Cores, maxSimCores)
	case !(c.ArrivalMean > 0) || math.IsInf(c.ArrivalMean, 0):
		return fmt.Errorf("--arrival-mean %v: want positive seconds", c.ArrivalMean)
	case !(c.Epoch > 0) || math.IsInf(c.Epoch, 0):
		return fmt.Errorf("--epoch %v: want positive seconds", c.Epoch)
	case c.RefitEvery < 1:
		return fmt.Errorf("--refit-every %d: want at least 1", c.RefitEvery)
	case c.MaxUnits < 0:
		return fmt.Errorf("--max-units %d: want >= 0", c.MaxUnits)
	}
	return nil
}

func runSim(args []string, stdout, stderr io.Writer) int {
	f, err := parseSimFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	if len(f.sweep) > 0 {
		return runSweep(f, stdout, stderr)
	}
	policies := alloc.Policies()
	if f.policy != "all" {
		policies = []alloc.Policy{alloc.Policy(f.policy)}
	}
	results := make([]simResult, 0, len(policies))
	for _, p := range policies {
		r, err := simulate(f.simConfig, p)
		if err != nil {
			return failTo(stderr, exitFailure, err)
		}
		results = append(results, r)
	}
	if f.plot != "" {
		if err := plotQuality(f.plot, f.simConfig, results); err != nil {
			return failTo(stderr, exitFailure, err)
		}
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		var v any = results
		if len(results) == 1 {
			v = results[0]
		}
		if err := enc.Encode(v); err != nil {
			return failTo(stderr, exitFailure, err)
		}
		return exitOK
	}
	printSim(stdout, f.simConfig, results)
	return exitOK
}

// simResult is one policy's outcome; the JSON names are a contract.
type simResult struct {
	Policy        string  `json:"policy"`
	Jobs          int     `json:"jobs"`
	Cores         int     `json:"cores"`
	AvgQuality    float64 `json:"avg_quality"`
	MeanTimeTo90  float64 `json:"mean_time_to_90"`
	MeanTimeTo95  float64 `json:"mean_time_to_95"`
	P50TimeTo90   float64 `json:"p50_time_to_90"`
	P95TimeTo90   float64 `json:"p95_time_to_90"`
	P50TimeTo95   float64 `json:"p50_time_to_95"`
	P95TimeTo95   float64 `json:"p95_time_to_95"`
	MakespanS     float64 `json:"makespan_s"`
	Epochs        int     `json:"epochs"`
	DecisionMsMax float64 `json:"decision_ms_max"` // wall clock: differs between runs
	FitMsMax      float64 `json:"fit_ms_max"`      // the slowest epoch's curve refits, outside the decision
	// quality is the mean quality of the running jobs after each epoch,
	// at its end time (--plot).
	quality []qualityAt
}

type qualityAt struct{ t, q float64 }

// jobKind is a synthetic stand-in for a zoo model's loss curve and step cost;
// recorded traces of the real models are later work.
type jobKind struct {
	name      string
	family    alloc.Family
	l0, floor float64
	tau, quad float64 // iterations of the curve's time scale; sublinear's k² weight
	iters     float64 // the job's fixed work
	step      alloc.StepModel
	maxUnits  int
	fitted    *alloc.Curve // a trace kind's curve (sim_trace.go)
}

var simKinds = []jobKind{
	{name: "mlp-like", family: alloc.Exponential, l0: 2.3, floor: 0.1, tau: 300, iters: 2000, step: alloc.StepModel{C: 0.5, O: 0.02}, maxUnits: 32},
	{name: "ctrdnn-like", family: alloc.Sublinear, l0: 0.69, floor: 0.45, tau: 100, quad: 0.01, iters: 3000, step: alloc.StepModel{C: 0.3, O: 0.01}, maxUnits: 64},
	{name: "linreg-like", family: alloc.Exponential, l0: 10, floor: 0.5, tau: 150, iters: 1000, step: alloc.StepModel{C: 0.1, O: 0.005}, maxUnits: 16},
	{name: "nce-like", family: alloc.Sublinear, l0: 5, floor: 2, tau: 200, quad: 0.001, iters: 4000, step: alloc.StepModel{C: 0.8, O: 0.03}, maxUnits: 64},
}

// curve is the kind's true loss curve in the allocator's parameterisation.
func (k jobKind) curve() alloc.Curve {
	if k.fitted != nil {
		return *k.fitted
	}
	span := k.l0 - k.floor
	if k.family == alloc.Exponential {
		return alloc.Curve{Family: alloc.Exponential, P: [4]float64{span, 1 / k.tau, k.floor}, L0: k.l0}
	}
	// floor + span/(1 + k/τ + quad·(k/τ)²)
	return alloc.Curve{Family: alloc.Sublinear, L0: k.l0,
		P: [4]float64{k.quad / (k.tau * k.tau * span), 1 / (k.tau * span), 1 / span, k.floor}}
}

// simJob is one job's state in the simulation.
type simJob struct {
	id       string
	kind     *jobKind
	truth    alloc.Curve
	arrival  float64
	priority float64
	k        float64 // iterations done
	k90, k95 float64 // iterations at 90 % / 95 % of the final reduction
	t90, t95 float64
	done     float64 // finish time; 0 while running
	hist     []alloc.Point
	fit      *alloc.Curve
	sinceFit int
	units    int
}

// maxHistory bounds a job's recorded points (the first is always kept):
// the decaying weights make older points matter little anyway.
const maxHistory = 64

// pointsPerEpoch is how many loss observations a running job records an epoch.
const pointsPerEpoch = 4

// lossNoise is the relative noise on observed losses.
const lossNoise = 0.01

func newSimJobs(c simConfig, r *rand.Rand) []*simJob {
	jobs := make([]*simJob, c.Jobs)
	kinds := c.kinds
	if len(kinds) == 0 {
		kinds = simKinds
	}
	t := 0.0
	for i := range jobs {
		var j *simJob
		if i < len(c.schedule) {
			s := c.schedule[i]
			j = &simJob{id: fmt.Sprintf("j%04d", i), kind: s.kind, truth: s.kind.curve(), arrival: s.arrival, priority: s.priority}
		} else {
			t += r.ExpFloat64() * c.ArrivalMean
			k := &kinds[r.IntN(len(kinds))]
			j = &simJob{id: fmt.Sprintf("j%04d", i), kind: k, truth: k.curve(), arrival: t,
				priority: []float64{1, 2, 4}[r.IntN(3)]}
		}
		k := j.kind
		final := j.truth.L0 - j.truth.Predict(k.iters)
		j.k90 = itersToReach(j.truth, j.truth.L0-0.9*final, k.iters)
		j.k95 = itersToReach(j.truth, j.truth.L0-0.95*final, k.iters)
		j.hist = []alloc.Point{{Iter: 0, Loss: j.truth.L0}}
		jobs[i] = j
	}
	return jobs
}

// itersToReach bisects the decreasing curve for the iteration where it
// reaches loss target.
func itersToReach(c alloc.Curve, target, hi float64) float64 {
	lo := 0.0
	for range 100 {
		mid := (lo + hi) / 2
		if c.Predict(mid) > target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// simulate runs one policy over the jobs the seed draws.
func simulate(c simConfig, p alloc.Policy) (simResult, error) {
	r := rand.New(rand.NewPCG(c.Seed, 0x51a9))
	pending := newSimJobs(c, r)
	all := slices.Clone(pending)
	noise := rand.New(rand.NewPCG(c.Seed, 0x401e))
	res := simResult{Policy: string(p), Jobs: c.Jobs, Cores: c.Cores}
	var active []*simJob
	var qualitySum float64
	t := 0.0
	for len(pending) > 0 || len(active) > 0 {
		for len(pending) > 0 && pending[0].arrival <= t {
			active, pending = append(active, pending[0]), pending[1:]
		}
		if len(active) == 0 {
			t = math.Ceil(pending[0].arrival/c.Epoch) * c.Epoch
			continue
		}
		fitMs := refitCurves(active, c.RefitEvery)
		res.FitMsMax = math.Max(res.FitMsMax, fitMs)
		jobs := allocJobs(active, c.MaxUnits)
		start := time.Now()
		grant, err := alloc.Allocate(p, jobs, c.Cores, alloc.Options{Epoch: c.Epoch})
		if err != nil {
			return simResult{}, fmt.Errorf("sim: epoch at %.0f s: %w", t, err)
		}
		res.DecisionMsMax = math.Max(res.DecisionMsMax, float64(time.Since(start).Microseconds())/1000)
		var q float64
		for i, j := range active {
			j.units = grant[i]
			j.advance(t, c.Epoch, noise)
			q += alloc.NormalisedReduction(j.truth.L0, j.truth.Predict(j.k), j.truth.Floor())
		}
		qualitySum += q / float64(len(active))
		res.quality = append(res.quality, qualityAt{t + c.Epoch, q / float64(len(active))})
		res.Epochs++
		t += c.Epoch
		active = slices.DeleteFunc(active, func(j *simJob) bool { return j.done > 0 })
	}
	res.AvgQuality = qualitySum / float64(res.Epochs)
	var to90, to95 []float64
	for _, j := range all {
		to90, to95 = append(to90, j.t90-j.arrival), append(to95, j.t95-j.arrival)
		res.MakespanS = math.Max(res.MakespanS, j.done)
	}
	res.MeanTimeTo90, res.P50TimeTo90, res.P95TimeTo90 = alloc.Summarise(to90)
	res.MeanTimeTo95, res.P50TimeTo95, res.P95TimeTo95 = alloc.Summarise(to95)
	return res, nil
}

// refitCurves refits the curve of every job due for it and returns the
// milliseconds spent.
func refitCurves(active []*simJob, every int) float64 {
	start := time.Now()
	for _, j := range active {
		j.sinceFit++
		if len(j.hist) < alloc.MinPoints || (j.fit != nil && j.sinceFit < every) {
			continue
		}
		if c, err := alloc.FitCurve(j.hist, alloc.FitOptions{}); err == nil {
			j.fit = &c
		}
		j.sinceFit = 0
	}
	return float64(time.Since(start).Microseconds()) / 1000
}

func allocJobs(active []*simJob, maxUnits int) []alloc.Job {
	jobs := make([]alloc.Job, len(active))
	for i, j := range active {
		jobs[i] = alloc.Job{ID: j.id, History: j.hist, Curve: j.fit, Step: j.kind.step, UnitsNow: j.units,
			Priority: j.priority, MaxUnits: j.kind.maxUnits, Remaining: j.kind.iters - j.k}
		if maxUnits > 0 {
			jobs[i].MaxUnits = maxUnits
		}
		if j.fit == nil && len(j.hist) >= alloc.MinPoints {
			// The fit failed: keep Allocate from trying again, so it uses its prior.
			jobs[i].History = []alloc.Point{j.hist[0], j.hist[len(j.hist)-1]}
		}
	}
	return jobs
}

// advance runs the job for one epoch from time t on its units, records the
// times it crosses 90 % and 95 % and when it finishes, and observes noisy
// losses along the way.
func (j *simJob) advance(t, epoch float64, noise *rand.Rand) {
	if j.units == 0 {
		return
	}
	rate := 1 / j.kind.step.Seconds(float64(j.units)) // iterations per second
	from := j.k
	j.k = math.Min(j.kind.iters, from+rate*epoch)
	at := func(k float64) float64 { return t + (k-from)/rate }
	if j.t90 == 0 && j.k >= j.k90 {
		j.t90 = at(math.Max(from, j.k90))
	}
	if j.t95 == 0 && j.k >= j.k95 {
		j.t95 = at(math.Max(from, j.k95))
	}
	if j.k >= j.kind.iters {
		j.done = at(j.kind.iters)
	}
	for i := 1; i <= pointsPerEpoch; i++ {
		k := from + (j.k-from)*float64(i)/pointsPerEpoch
		j.hist = append(j.hist, alloc.Point{Iter: k, Loss: j.truth.Predict(k) * (1 + lossNoise*noise.NormFloat64())})
	}
	if len(j.hist) > maxHistory {
		j.hist = append(j.hist[:1], j.hist[len(j.hist)-maxHistory+1:]...)
	}
}

func printSim(w io.Writer, c simConfig, results []simResult) {
	kinds := "synthetic curves standing in for the zoo models"
	if c.traceDir != "" {
		kinds = "kinds from the traces in " + c.traceDir
		if len(c.schedule) > 0 {
			kinds += ", its arrivals replayed"
		}
	}
	fmt.Fprintf(w, "%d jobs (%s), %d cores, arrivals every %g s on average, %.0f s epochs, seed %d\n\n",
		c.Jobs, kinds, c.Cores, c.ArrivalMean, c.Epoch, c.Seed)
	var fair *simResult
	for i := range results {
		if results[i].Policy == string(alloc.Fair) {
			fair = &results[i]
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "policy\tavg quality\tt90 mean s\tt90 p50\tt90 p95\tt95 mean s\tmakespan s\tdecision ms max\tfit ms max\t"
	if fair != nil {
		head = "policy\tavg quality\tvs fair\tt90 mean s\tvs fair\tt90 p50\tt90 p95\tt95 mean s\tmakespan s\tdecision ms max\tfit ms max\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%.3f\t", r.Policy, r.AvgQuality)
		if fair != nil {
			fmt.Fprintf(tw, "%.2f\t", r.AvgQuality/fair.AvgQuality)
		}
		fmt.Fprintf(tw, "%.0f\t", r.MeanTimeTo90)
		if fair != nil {
			fmt.Fprintf(tw, "%.2f\t", r.MeanTimeTo90/fair.MeanTimeTo90)
		}
		fmt.Fprintf(tw, "%.0f\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t\n", r.P50TimeTo90, r.P95TimeTo90, r.MeanTimeTo95, r.MakespanS, r.DecisionMsMax, r.FitMsMax)
	}
	tw.Flush()
}
