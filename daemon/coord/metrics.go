package coord

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heterps/heterps/daemon/api"
)

// The coordinator's metrics are read from its jobs and nodes under c.mu
// when Prometheus scrapes (coordCollector), never updated on the request
// or heartbeat paths; a job or node the coordinator forgets has no series
// from the next scrape on. Labels are ids (job_id, stage, replica, node),
// job_id rather than job, which Prometheus gives every target; all
// bounded by what the coordinator keeps (Config.KeepFinished,
// Config.DeadNodeRetention).

// RegisterMetrics registers the coordinator's metrics with reg.
func (c *Coordinator) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(coordCollector{c})
}

// Ready is nil while the coordinator serves its API with its state
// database open (Serve is running and has not begun to stop; the database
// is opened by New and closed only after that), and says why not
// otherwise (for /readyz).
func (c *Coordinator) Ready() error {
	if !c.serving.Load() {
		return errors.New("the coordinator is not serving its API (starting or stopping)")
	}
	if c.store != nil {
		if _, err := c.store.Health(); err != nil {
			return fmt.Errorf("the state database cannot record changes: %w", err)
		}
	}
	return nil
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	jobsDesc          = desc("heterps_jobs", "Jobs the coordinator keeps, by state.", "state")
	stateFailuresDesc = desc("heterps_coordinator_state_commit_failures_total",
		"Commits to the coordinator's state database that failed (a full disk): the changes in them are not durable until recorded again.")
	stallsDesc = desc("heterps_coordinator_stalls_total",
		"Times the coordinator found it had not run for over half a heartbeat timeout (stopped, paused or starved); a stall past the nodes' lease fences their tasks.")
	jobStateDesc   = desc("heterps_job_state", "1 for the job's current state.", "job_id", "state")
	jobStepDesc    = desc("heterps_job_step", "The fewest steps any stage replica of the job has completed.", "job_id")
	jobStepsDesc   = desc("heterps_job_target_steps", "The step the job trains to.", "job_id")
	jobSamplesDesc = desc("heterps_job_trained_samples_total",
		"Samples the job has trained on since it started (steps past its restored checkpoint times the global batch).", "job_id")
	jobLossDesc   = desc("heterps_job_loss", "The mean training loss the last stage's replicas reported.", "job_id")
	jobRateDesc   = desc("heterps_job_samples_per_second", "The job's measured throughput: its slowest stage's.", "job_id")
	jobCostDesc   = desc("heterps_job_cost", "What the job has cost so far, in the catalog's price unit.", "job_id")
	jobRestarts   = desc("heterps_job_restarts", "Automatic restarts in the job's chain before it.", "job_id")
	jobGeneration = desc("heterps_job_generation", "The job's generation: placements and elastic resizes.", "job_id")
	jobLimitDesc  = desc("heterps_job_throughput_limit_samples_per_second",
		"The throughput the job file asks for (0: none, the scheduler's floor).", "job_id")
	jobBelowDesc = desc("heterps_job_below_throughput_limit",
		"1 while the job runs below its throughput_limit after losing nodes (until it moves back up), else 0.", "job_id")
	stagePredDesc = desc("heterps_job_stage_predicted_throughput_samples_per_second",
		"The plan's throughput for the stage.", "job_id", "stage")
	stageMeasDesc = desc("heterps_job_stage_measured_throughput_samples_per_second",
		"The stage's measured throughput: the sum of its replicas'.", "job_id", "stage")
	replicaBatchDesc = desc("heterps_job_replica_batch_size", "The batch b_k the replica is assigned.", "job_id", "stage", "replica")
	replicaStepDesc  = desc("heterps_job_replica_step_seconds",
		"The replica's compute time per step t_k, as the batch controller sees it.", "job_id", "stage", "replica")
	replicaRateDesc = desc("heterps_job_replica_throughput_samples_per_second",
		"The replica's throughput X_k = b_k / t_k at the batch it measured t_k at.", "job_id", "stage", "replica")
	adjustmentsDesc = desc("heterps_job_batching_adjustments_total", "Batch splits the dynamic batching controller has changed.", "job_id")
	nodesDesc       = desc("heterps_nodes", "Nodes the coordinator lists, by state.", "state")
	heartbeatDesc   = desc("heterps_node_heartbeat_age_seconds", "Time since a live node's last heartbeat.", "node", "node_id")
	drainingDesc    = desc("heterps_node_draining", "1 for a live node taken out of service (heterps nodes drain), 0 otherwise.", "node", "node_id")
)

var jobStates = []api.JobState{api.JobPending, api.JobQueued, api.JobPlanning, api.JobRunning, api.JobRestarting,
	api.JobDone, api.JobFailed, api.JobCancelled}

// coordCollector reads the coordinator's state at scrape time.
type coordCollector struct{ c *Coordinator }

func (coordCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{jobsDesc, jobStateDesc, jobStepDesc, jobStepsDesc, jobSamplesDesc, jobLossDesc,
		jobRateDesc, jobCostDesc, jobRestarts, jobGeneration, jobLimitDesc, jobBelowDesc, stagePredDesc, stageMeasDesc, replicaBatchDesc,
		replicaStepDesc, replicaRateDesc, adjustmentsDesc, nodesDesc, heartbeatDesc, drainingDesc, stateFailuresDesc, stallsDesc} {
		ch <- d
	}
}

func (cc coordCollector) Collect(ch chan<- prometheus.Metric) {
	c := cc.c
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	byState := map[api.JobState]int{}
	for _, j := range c.jobs {
		byState[j.state]++
		collectJob(ch, j, c.status(j, now))
	}
	for _, s := range jobStates {
		gauge(ch, jobsDesc, float64(byState[s]), string(s))
	}
	nodes := map[api.NodeState]int{}
	for _, n := range c.nodes {
		nodes[n.state]++
		if n.alive() {
			gauge(ch, heartbeatDesc, now.Sub(n.lastSeen).Seconds(), n.req.Name, n.id)
			gauge(ch, drainingDesc, oneIf(c.draining(n)), n.req.Name, n.id)
		}
	}
	for _, s := range []api.NodeState{api.NodeAlive, api.NodeDead} {
		gauge(ch, nodesDesc, float64(nodes[s]), string(s))
	}
	if c.store != nil {
		failures, _ := c.store.Health()
		counter(ch, stateFailuresDesc, float64(failures))
	}
	counter(ch, stallsDesc, float64(c.stalls))
}

// collectJob sends the series of job j, whose status is s. c.mu is held.
func collectJob(ch chan<- prometheus.Metric, j *job, s api.JobStatus) {
	id := j.id
	gauge(ch, jobStateDesc, 1, id, string(j.state))
	gauge(ch, jobStepDesc, float64(s.Step), id)
	gauge(ch, jobStepsDesc, float64(s.Steps), id)
	counter(ch, jobSamplesDesc, float64(max(0, s.Step-j.firstStep())*int64(j.file.Batch)), id)
	gauge(ch, jobLossDesc, s.Loss, id)
	gauge(ch, jobRateDesc, s.SamplesPerS, id)
	gauge(ch, jobCostDesc, s.CostSoFar, id)
	gauge(ch, jobRestarts, float64(s.Restarts), id)
	gauge(ch, jobGeneration, float64(s.Generation), id)
	gauge(ch, jobLimitDesc, j.file.ThroughputLimit, id)
	gauge(ch, jobBelowDesc, oneIf(runsBelowLimit(j)), id)
	if s.Batching != nil {
		counter(ch, adjustmentsDesc, float64(s.Batching.Adjustments), id)
	}
	for _, st := range s.Stages {
		stage := strconv.Itoa(st.Stage)
		gauge(ch, stagePredDesc, st.PredictedThroughput, id, stage)
		gauge(ch, stageMeasDesc, st.MeasuredThroughput, id, stage)
	}
	if len(s.Stages) == 0 {
		return // not placed: its tasks are those of an earlier placement, if any
	}
	for _, t := range j.tasks {
		if t.task.Role != api.RoleStage {
			continue
		}
		labels := []string{id, strconv.Itoa(t.task.Stage), strconv.Itoa(t.task.Replica)}
		gauge(ch, replicaBatchDesc, float64(t.task.Batch), labels...)
		if r := t.report; r.StepSeconds > 0 {
			gauge(ch, replicaStepDesc, r.StepSeconds, labels...)
			gauge(ch, replicaRateDesc, float64(r.Batch)/r.StepSeconds, labels...)
		}
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

// oneIf is a 0/1 gauge's value.
func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
