package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

func init() {
	registerStoppable("status", "show a job (or every job) of a running coordinator", runStatus)
}

type statusFlags struct {
	job   string
	coord coordFlags
	json  bool
}

func parseStatusFlags(args []string, stderr io.Writer) (*statusFlags, error) {
	var f statusFlags
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.coord.add(fs)
	fs.BoolVar(&f.json, "json", false, "print JSON")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	switch len(rest) {
	case 0:
	case 1:
		f.job = rest[0]
	default:
		return nil, errors.New("usage: heterps status [job-id] [--coordinator URL] [--secret-file F] [--json]")
	}
	return &f, nil
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseStatusFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	c, err := f.coord.client()
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	defer c.close()
	c.retryFor(requestRetryFor, stderr)
	if f.job == "" {
		jobs, err := c.jobs(ctx)
		if err != nil {
			return failTo(stderr, exitFailure, err)
		}
		if f.json {
			return printJSON(stdout, stderr, jobs) // nodes: heterps nodes --json
		}
		nodes, err := c.nodes(ctx)
		if err != nil {
			return failTo(stderr, exitFailure, err)
		}
		printJobList(stdout, jobs)
		if a, err := c.alloc(ctx); err != nil {
			fmt.Fprintf(stderr, "heterps: allocator: %v\n", err)
		} else {
			printAllocDecision(stdout, a)
		}
		fmt.Fprintln(stdout)
		printNodeList(stdout, nodes, time.Now())
		if ps, err := c.profiles(ctx); err != nil {
			fmt.Fprintf(stderr, "heterps: profiles: %v\n", err)
		} else {
			printProfileList(stdout, ps)
		}
		return exitOK
	}
	s, err := c.job(ctx, f.job)
	if err != nil {
		return failTo(stderr, exitFailure, err)
	}
	if f.json {
		return printJSON(stdout, stderr, s)
	}
	printJob(stdout, s)
	return exitOK
}

func printJobList(w io.Writer, jobs []api.JobStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "job\tname\tstate\tstep\tloss\tsamples/s\tcost")
	for _, s := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%.4g\t%.4g\t%.4g\n", s.ID, s.Name, listState(s), s.Step, s.Steps, s.Loss, s.SamplesPerS, s.CostSoFar)
	}
	tw.Flush()
}

// listState is a job's state in the job list, with the job that carries
// it on when it was restarted (after a failure, or to move): "failed ->
// j2".
func listState(s api.JobStatus) string {
	if s.RestartedAs != "" {
		return fmt.Sprintf("%s -> %s", s.State, s.RestartedAs)
	}
	return string(s.State)
}

// printAllocDecision prints a line with the allocator's last decision:
// when, how long it took and each job's units (and what it had), or that
// none was made yet. It prints nothing when the allocator is off.
func printAllocDecision(w io.Writer, a api.AllocStatus) {
	if a.Policy == "" || a.Policy == "off" {
		return
	}
	fmt.Fprintf(w, "allocator %s, every %s: ", a.Policy, (time.Duration(a.EpochMS) * time.Millisecond).String())
	if a.At == nil {
		fmt.Fprintln(w, "no decision yet")
		return
	}
	fmt.Fprintf(w, "decision %d at %s (%.1f ms):", a.Epochs, a.At.Local().Format(time.TimeOnly), a.DecisionMS)
	if len(a.Jobs) == 0 {
		fmt.Fprint(w, " no running jobs")
	}
	for i, g := range a.Jobs {
		if i > 0 {
			fmt.Fprint(w, ";")
		}
		fmt.Fprintf(w, " %s %d unit(s) on %s (was %d, quality %.3f)", g.JobID, g.Units, g.Node, g.Was, g.Quality)
	}
	fmt.Fprintln(w)
}

// printJobAlloc prints the allocator's view of a job: its units, loss
// beside the fitted curve's prediction, quality against its target, and
// priority.
func printJobAlloc(w io.Writer, a *api.JobAlloc) {
	if a == nil {
		return
	}
	fmt.Fprintf(w, "  allocator: %d unit(s), loss %.4f", a.Units, a.Loss)
	if a.PredictedLoss != 0 {
		fmt.Fprintf(w, " (predicted %.4f)", a.PredictedLoss)
	} else {
		fmt.Fprint(w, " (no fit yet)")
	}
	fmt.Fprintf(w, ", quality %.3f", a.Quality)
	if a.Target > 0 {
		fmt.Fprintf(w, " of target %.3f", a.Target)
	}
	fmt.Fprintf(w, ", priority %g\n", a.Priority)
}

// printNodeList shows the nodes a coordinator knows: who they are, what
// they offer, whether they are alive and how long ago they last
// heartbeated, and the tasks they run.
func printNodeList(w io.Writer, nodes []api.NodeStatus, now time.Time) {
	if len(nodes) == 0 {
		fmt.Fprintln(w, "no nodes registered")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "node\tid\ttype\tunits\tstate\theartbeat\ttasks")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", n.Name, n.ID, n.Type, n.Units, stateText(n), heartbeatAge(n.LastHeartbeat, now), taskList(n))
	}
	tw.Flush()
}

// printProfileList shows the measured profiles the coordinator stores (the
// jobs of their models plan on them), nothing when there are none.
func printProfileList(w io.Writer, ps []api.Profile) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "profile\ttype\tlayers\tB_o\tstored")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", p.Model, p.Type, p.Layers, p.ProfileBatch, p.StoredAt.Local().Format(time.DateTime))
	}
	tw.Flush()
}

// heartbeatAge is how long ago t was, "3.2s ago", or "-" if never.
func heartbeatAge(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(100*time.Millisecond).String() + " ago"
}

// runResult is a job's outcome as `heterps run --json` and `submit --wait
// --json` print it: the measured figures beside the plan's predictions.
type runResult struct {
	Job         string       `json:"job"`
	Name        string       `json:"name"`
	State       api.JobState `json:"state"`
	Reason      string       `json:"reason,omitempty"`
	Steps       int64        `json:"steps"`
	Loss        float64      `json:"loss"`
	SamplesPerS float64      `json:"samples_per_s"`        // the slowest stage's measured throughput
	Predicted   float64      `json:"predicted_throughput"` // the plan's
	Cost        float64      `json:"cost"`                 // catalog prices x units placed x time running
	PlanCost    float64      `json:"plan_cost"`            // the cost model's for the whole run
	Seconds     float64      `json:"seconds"`              // from start to finish (so far, while it runs)
	Method      string       `json:"method,omitempty"`     // the scheduling method
	PSShards    []string     `json:"ps_shards"`            // node of each parameter-server shard
	Stages      []runStage   `json:"stages"`
	Plan        *sched.Plan  `json:"plan,omitempty"`
	// RestoredFrom and Checkpoint: where the job started from and its
	// latest complete checkpoint, when there are.
	RestoredFrom *api.CheckpointStatus `json:"restored_from,omitempty"`
	Checkpoint   *api.CheckpointStatus `json:"checkpoint,omitempty"`
	// CheckpointFailure is the latest checkpoint that could not be
	// written, while no later one is complete; CheckpointFailures counts
	// the files not written.
	CheckpointFailure  *api.CheckpointFailure `json:"checkpoint_failure,omitempty"`
	CheckpointFailures int64                  `json:"checkpoint_failures,omitempty"`
	// CheckpointWriting is the checkpoint being written now, if any.
	CheckpointWriting *api.CheckpointWriting `json:"checkpoint_writing,omitempty"`
	// CheckpointAsked is the checkpoint asked for (heterps checkpoint)
	// and not yet complete, if any.
	CheckpointAsked *api.CheckpointAsked `json:"checkpoint_asked,omitempty"`
	// Loading lists the nodes whose PS shards are still loading the
	// restored checkpoint.
	Loading []string `json:"loading,omitempty"`
}

type runStage struct {
	Stage               int      `json:"stage"`
	Type                string   `json:"type"`
	Units               int      `json:"units"`
	FirstLayer          int      `json:"first_layer"`
	LastLayer           int      `json:"last_layer"`
	Nodes               []string `json:"nodes"`
	PredictedThroughput float64  `json:"predicted_throughput"`
	MeasuredThroughput  float64  `json:"measured_throughput"`
	DenseSync           string   `json:"dense_sync,omitempty"` // ps or allreduce
}

// resultOf assembles a job's result from its status.
func resultOf(s api.JobStatus) (runResult, error) {
	r := runResult{Job: s.ID, Name: s.Name, State: s.State, Reason: s.Reason, Steps: s.Step, Loss: s.Loss,
		SamplesPerS: s.SamplesPerS, Cost: s.CostSoFar, PSShards: s.PS, Stages: []runStage{},
		RestoredFrom: s.RestoredFrom, Checkpoint: s.Checkpoint, CheckpointFailure: s.CheckpointFailure, CheckpointFailures: s.CheckpointFailures,
		CheckpointWriting: s.CheckpointWriting, CheckpointAsked: s.CheckpointAsked, Loading: s.Loading}
	if r.PSShards == nil {
		r.PSShards = []string{}
	}
	switch {
	case s.Started != nil && s.Finished != nil:
		r.Seconds = s.Finished.Sub(*s.Started).Seconds()
	case s.Started != nil && !s.State.Final(): // so far, by this machine's clock
		r.Seconds = max(0, time.Since(*s.Started).Seconds())
	}
	if len(s.Plan) > 0 {
		r.Plan = &sched.Plan{}
		if err := json.Unmarshal(s.Plan, r.Plan); err != nil {
			return r, fmt.Errorf("job %s: plan: %w", s.ID, err)
		}
		r.Method, r.Predicted, r.PlanCost = r.Plan.Method, r.Plan.Throughput, r.Plan.Cost
	}
	for _, st := range s.Stages {
		r.Stages = append(r.Stages, runStage{Stage: st.Stage, Type: st.Type, Units: st.Units, FirstLayer: st.FirstLayer,
			LastLayer: st.LastLayer, Nodes: st.Nodes, PredictedThroughput: st.PredictedThroughput,
			MeasuredThroughput: st.MeasuredThroughput, DenseSync: st.DenseSync})
	}
	return r, nil
}

// reportJob prints a final job status and returns the exit status: 0 if
// done, 3 if no plan was feasible, else 1.
func reportJob(stdout, stderr io.Writer, s api.JobStatus, asJSON bool) int {
	status := exitOK
	switch {
	case s.State == api.JobDone:
	case strings.HasPrefix(s.Reason, "no feasible plan"):
		status = exitInfeasible
	default:
		status = exitFailure
	}
	if asJSON {
		r, err := resultOf(s)
		if err != nil {
			return failTo(stderr, exitFailure, err)
		}
		if code := printJSON(stdout, stderr, r); code != exitOK {
			return code
		}
		return status
	}
	printJob(stdout, s)
	return status
}

// printJob prints a job's plan, outcome and stages: the measured
// throughput of each beside the cost model's prediction.
func printJob(w io.Writer, s api.JobStatus) {
	r, err := resultOf(s)
	if err != nil {
		fmt.Fprintln(w, err)
	}
	if p := r.Plan; p != nil && p.Feasible {
		fmt.Fprintf(w, "plan (%s): %d stage(s), %d parameter-server shard(s), predicted %.4g samples/s, run cost %.4g\n",
			p.Method, len(p.Stages), len(r.PSShards), p.Throughput, p.Cost)
		if line := sourcesLine(p.Sources, p.DenseSync); line != "" {
			fmt.Fprintf(w, "  layer times: %s\n", line)
		}
	}
	fmt.Fprintf(w, "job %s (%s): %s", r.Job, r.Name, r.State)
	if r.Reason != "" {
		fmt.Fprintf(w, ": %s", r.Reason)
	}
	fmt.Fprintf(w, "\n  steps %d/%d, loss %.4f, %.4g samples/s, %.1f s, cost %.4g\n", s.Step, s.Steps, r.Loss, r.SamplesPerS, r.Seconds, r.Cost)
	printReplans(w, s.Replan)
	printJobAlloc(w, s.Alloc)
	for _, a := range s.Avoids {
		fmt.Fprintf(w, "  avoids node %s until %s (it failed this job: no restart or move back up uses it)\n", a.Node, a.Until.Format(time.RFC3339))
	}
	if len(r.Stages) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tlayers\ttype\tunits\tdense sync\tpredicted/s\tmeasured/s\tratio\tnodes\t")
	for _, st := range r.Stages {
		ratio := "-"
		if st.PredictedThroughput > 0 {
			ratio = fmt.Sprintf("%.3f", st.MeasuredThroughput/st.PredictedThroughput)
		}
		fmt.Fprintf(tw, "%d\t%d-%d\t%s\t%d\t%s\t%.4g\t%.4g\t%s\t%s\t\n", st.Stage, st.FirstLayer, st.LastLayer, st.Type, st.Units,
			cmp.Or(st.DenseSync, "-"), st.PredictedThroughput, st.MeasuredThroughput, ratio, strings.Join(st.Nodes, ","))
	}
	tw.Flush()
	if s.JoiningAt > 0 {
		fmt.Fprintf(w, "  replicas added to stage 0 join it at step %d\n", s.JoiningAt)
	}
	if len(r.PSShards) > 0 {
		fmt.Fprintf(w, "  parameter servers on %s\n", strings.Join(r.PSShards, ", "))
	}
	if c := r.RestoredFrom; c != nil {
		fmt.Fprintf(w, "  restored from step %d: %s\n", c.Step, c.Dir)
	}
	if len(r.Loading) > 0 {
		fmt.Fprintf(w, "  parameter servers still loading the checkpoint on %s: training waits for them\n", strings.Join(r.Loading, ", "))
	}
	if c := r.Checkpoint; c != nil {
		fmt.Fprintf(w, "  latest checkpoint: step %d in %s\n", c.Step, c.Dir)
	}
	if c := r.CheckpointWriting; c != nil {
		fmt.Fprintf(w, "  writing the checkpoint of step %d: %.1f MiB so far\n", c.Step, float64(c.Bytes)/(1<<20))
	}
	if a := r.CheckpointAsked; a != nil {
		fmt.Fprintf(w, "  checkpoint asked for at step %d (try %d, asked %s)\n", a.Step, a.Tries, a.At.Format(time.RFC3339))
	}
	if f := r.CheckpointFailure; f != nil {
		fmt.Fprintf(w, "  %s\n", checkpointFailureNote(s, f))
	}
	if s.FinalCheckpointBy != nil && !lastCheckpointFailed(s) {
		fmt.Fprintf(w, "  %s\n", finalWaitNote(s))
	}
	if n := r.CheckpointFailures; n > 0 {
		fmt.Fprintf(w, "  checkpoint files not written so far: %d (see the PS nodes' logs)\n", n)
	}
	printBatching(w, s)
}

// printBatching shows how the data-parallel stages split their batch: the
// mode, the adjustments (and kill-restart resizes) made, and each
// replica's batch and compute time, a line per stage when several stages
// have replicas (a pipeline's lanes), and why the batches stay uniform
// when they must.
func printBatching(w io.Writer, s api.JobStatus) {
	b := s.Batching
	if b == nil {
		return
	}
	var wide []api.StageStatus
	for _, st := range s.Stages {
		if len(st.Nodes) >= 2 {
			wide = append(wide, st)
		}
	}
	if len(wide) == 0 {
		return
	}
	fmt.Fprintf(w, "  batching %s", b.Mode)
	if b.Reason != "" {
		fmt.Fprintf(w, " (%s)", b.Reason)
	} else {
		fmt.Fprintf(w, ", %d adjustment(s)", b.Adjustments)
	}
	if b.Restarts > 0 {
		fmt.Fprintf(w, ", %d restart(s)", b.Restarts)
	}
	fmt.Fprint(w, ":")
	for _, st := range wide {
		if len(wide) > 1 {
			fmt.Fprintf(w, "\n    stage %d:", st.Stage)
		}
		printSplit(w, st)
	}
	fmt.Fprintln(w)
}

func printSplit(w io.Writer, st api.StageStatus) {
	for i, n := range st.Nodes {
		fmt.Fprintf(w, " %s", n)
		if i < len(st.Batches) {
			fmt.Fprintf(w, " b=%d", st.Batches[i])
		}
		if i < len(st.StepSeconds) && st.StepSeconds[i] > 0 {
			fmt.Fprintf(w, " t=%.1fms", 1e3*st.StepSeconds[i])
		}
		if i+1 < len(st.Nodes) {
			fmt.Fprint(w, ";")
		}
	}
}

// jobProgress shows a running job's progress as `heterps train` does (a
// bar on a terminal, a line every few seconds otherwise), with a line of
// its own for each checkpoint that could not be written and once the job,
// trained, waits for its last checkpoint; done ends it.
func jobProgress(w io.Writer) (update func(api.JobStatus), done func()) {
	var p *progress
	var notes checkpointNotes
	shown := int64(0) // nothing to show before the first step
	update = func(s api.JobStatus) {
		for _, msg := range notes.of(s) {
			if p == nil {
				fmt.Fprintln(w, msg)
			} else {
				p.line(msg)
			}
		}
		if s.Step == shown || (s.RestoredFrom != nil && s.Step <= s.RestoredFrom.Step) {
			return // nothing trained yet (a restored job starts at its checkpoint's step)
		}
		if p == nil {
			p = newProgress(w, int(s.Steps))
		}
		shown = s.Step
		p.update(s.Step, s.Loss, s.SamplesPerS)
	}
	done = func() {
		if p != nil {
			p.done()
		}
	}
	return update, done
}

// checkpointNotes picks what a job's progress says of its checkpoints,
// each thing once: a checkpoint not written (per step), and the wait of a
// trained job for its last one.
type checkpointNotes struct {
	failed  int64 // the step of the last failure said
	waiting bool
}

func (n *checkpointNotes) of(s api.JobStatus) []string {
	var out []string
	if f := s.CheckpointFailure; f != nil && f.Step != n.failed {
		n.failed = f.Step
		n.waiting = n.waiting || lastCheckpointFailed(s) // its note gives the wait
		out = append(out, checkpointFailureNote(s, f))
	}
	if s.FinalCheckpointBy != nil && !n.waiting {
		n.waiting = true
		out = append(out, finalWaitNote(s))
	}
	return out
}

// finalWaitNote says how long job s, trained, waits for its last
// checkpoint (FinalCheckpointBy set).
func finalWaitNote(s api.JobStatus) string {
	return fmt.Sprintf("trained all %d steps: waiting for the checkpoint of step %d until %s, then the job ends without it",
		s.Steps, s.Steps, clockTime(*s.FinalCheckpointBy))
}

// checkpointFailureNote says that f's checkpoint of job s was not written,
// why, and what happens next.
func checkpointFailureNote(s api.JobStatus, f *api.CheckpointFailure) string {
	next := "training goes on, the next is tried at its step"
	switch {
	case s.State.Final():
		next = "the job ended without it"
	case lastCheckpointFailed(s):
		next = fmt.Sprintf("it is the last step's: tried again every few seconds until %s (free the space or mend the cause meanwhile), then the job ends without it",
			clockTime(*s.FinalCheckpointBy))
	}
	return fmt.Sprintf("checkpoint of step %d NOT WRITTEN (%s): %s; %s", f.Step, cmp.Or(f.Node, "manifest"), f.Error, next)
}

// lastCheckpointFailed reports whether trained job s waits for the
// checkpoint of its last step after a failed try: the failure's note then
// says until when, and the wait's own note would repeat it.
func lastCheckpointFailed(s api.JobStatus) bool {
	f := s.CheckpointFailure
	return f != nil && s.FinalCheckpointBy != nil && f.Step == s.Steps
}

// clockTime is t's time of day in the local zone, named.
func clockTime(t time.Time) string { return t.Local().Format("15:04:05 MST") }
