package node

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/ps"
	"github.com/heterps/heterps/daemon/wire"
)

// observer is what a node tells the outside about itself: its metrics
// (Config.Metrics) and whether it is registered (Agent.Ready). Without a
// registry its metrics are nil and count nothing.
type observer struct {
	wire           *wire.Metrics
	ps             *ps.ClientMetrics
	steps, samples prometheus.Counter
	ckptFailures   prometheus.Counter
	ckptInPlace    prometheus.Counter
	fences         prometheus.Counter

	mu     sync.Mutex
	nodeID string // given by the coordinator; empty while not registered
}

// observe registers the node's metrics with reg (nil: none). The task and
// shard series are read from the agent at scrape time (agentCollector), so
// a job that leaves the node leaves no series behind.
func (a *Agent) observe(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	o := &a.obs
	var err error
	if o.wire, err = wire.NewMetrics(reg); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if o.ps, err = ps.NewClientMetrics(reg); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	o.steps = prometheus.NewCounter(prometheus.CounterOpts{Name: "heterps_node_steps_total",
		Help: "Training steps the node's stage replicas have completed."})
	o.samples = prometheus.NewCounter(prometheus.CounterOpts{Name: "heterps_node_samples_total",
		Help: "Samples the node's stage replicas have trained on."})
	o.ckptFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "heterps_node_checkpoint_write_failures_total",
		Help: "Checkpoint copies of the node's parameter-server shards that could not be written (a full disk, a lost mount): training went on without them."})
	o.ckptInPlace = prometheus.NewCounter(prometheus.CounterOpts{Name: "heterps_node_checkpoint_in_place_total",
		Help: "Checkpoints of the node's parameter-server shards written in place, training waiting for the disk: a copy did not fit in memory."})
	o.fences = prometheus.NewCounter(prometheus.CounterOpts{Name: "heterps_node_lease_fences_total",
		Help: "Times the node's lease ran out with tasks running: it stopped them (the coordinator did not answer within the lease) and registered anew."})
	for _, c := range []prometheus.Collector{o.steps, o.samples, o.ckptFailures, o.ckptInPlace, o.fences, agentCollector{a}} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// stepDone counts a stage step of samples samples.
func (o *observer) stepDone(samples int) {
	if o.steps != nil {
		o.steps.Inc()
		o.samples.Add(float64(samples))
	}
}

// checkpointFailed counts a checkpoint copy not written.
func (o *observer) checkpointFailed() {
	if o.ckptFailures != nil {
		o.ckptFailures.Inc()
	}
}

// checkpointInPlace counts a checkpoint written in place.
func (o *observer) checkpointInPlace() {
	if o.ckptInPlace != nil {
		o.ckptInPlace.Inc()
	}
}

// fenced counts tasks stopped because the lease ran out.
func (o *observer) fenced() {
	if o.fences != nil {
		o.fences.Inc()
	}
}

// registered records the node id the coordinator gave ("": none, the
// coordinator forgot the node or it is shutting down).
func (o *observer) registered(id string) {
	o.mu.Lock()
	o.nodeID = id
	o.mu.Unlock()
}

// Ready is nil once the node is registered with the coordinator, and says
// why not otherwise (for /readyz).
func (a *Agent) Ready() error {
	a.obs.mu.Lock()
	defer a.obs.mu.Unlock()
	if a.obs.nodeID == "" {
		return fmt.Errorf("node %s is not registered with the coordinator at %s", a.cfg.Name, a.cfg.Coordinator)
	}
	return nil
}

// taskLog is the agent's logger with the ids of the task s: its job, task,
// and stage and replica (stage tasks) or shard (PS tasks).
func (a *Agent) taskLog(s api.Task) *slog.Logger {
	if s.Role == api.RolePS {
		return a.log.With("job", s.JobID, "task", s.TaskID, "shard", s.Shard)
	}
	return a.log.With("job", s.JobID, "task", s.TaskID, "stage", s.Stage, "replica", s.Replica)
}

var (
	registeredDesc = prometheus.NewDesc("heterps_node_registered",
		"1 while the node is registered with the coordinator, else 0.", nil, nil)
	taskStepDesc = prometheus.NewDesc("heterps_node_task_step",
		"The last step a stage replica on this node completed.", []string{"job_id", "stage", "replica"}, nil)
	shardRowsDesc = prometheus.NewDesc("heterps_ps_shard_rows",
		"Embedding table rows a parameter-server shard on this node holds.", []string{"job_id", "shard"}, nil)
	shardBytesDesc = prometheus.NewDesc("heterps_ps_shard_bytes",
		"Memory a parameter-server shard on this node holds against its budget: blocks with optimiser state and table rows.", []string{"job_id", "shard"}, nil)
)

// agentCollector reads the agent's tasks and shards at scrape time.
type agentCollector struct{ a *Agent }

func (c agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{registeredDesc, taskStepDesc, shardRowsDesc, shardBytesDesc} {
		ch <- d
	}
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	registered := 0.0
	if a.Ready() == nil {
		registered = 1
	}
	ch <- prometheus.MustNewConstMetric(registeredDesc, prometheus.GaugeValue, registered)
	a.mu.Lock()
	for _, t := range a.tasks {
		s := t.current()
		if s.Role == api.RoleStage && t.report.Step > 0 {
			ch <- prometheus.MustNewConstMetric(taskStepDesc, prometheus.GaugeValue, float64(t.report.Step),
				s.JobID, strconv.Itoa(s.Stage), strconv.Itoa(s.Replica))
		}
	}
	a.mu.Unlock()
	if a.ps == nil {
		return
	}
	a.ps.mu.Lock()
	defer a.ps.mu.Unlock()
	for job, j := range a.ps.jobs {
		for _, s := range j.shards {
			shard := strconv.Itoa(s.Index())
			ch <- prometheus.MustNewConstMetric(shardRowsDesc, prometheus.GaugeValue, float64(s.Rows()), job, shard)
			ch <- prometheus.MustNewConstMetric(shardBytesDesc, prometheus.GaugeValue, float64(s.Bytes()), job, shard)
		}
	}
}
