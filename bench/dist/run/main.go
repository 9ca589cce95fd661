// Command run measures distributed training on this machine: ctrdnn on
// synthetic click data, trained by a coordinator and 2 then 4 node daemons
// on loopback (what `heterps run` starts, here in one process), beside
// single-process training with nn.Trainer in the same run. For each
// distributed run it prints the job's throughput and its ratio to
// single-process training, and each stage's measured throughput beside the
// cost model's prediction.
//
// Each node offers one 1-thread CPU unit (the local catalog's cpu-1t). The
// job's throughput floor is chosen so that the exact plan uses exactly N
// units: one stage of N data-parallel replicas, synchronised (BSP) through
// one parameter-server shard. It measures; it asserts nothing.
//
//	go run ./bench/dist/run [--steps 300] [--batch 512] [--nodes 2,4]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heterps/heterps/bench/internal/cpuprof"
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/daemon/node"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/native"
)

const (
	modelName = "ctrdnn"
	dataSpec  = "synthetic:1"
	unitType  = "cpu-1t"
)

func main() {
	steps := flag.Int("steps", 300, "training steps of every run")
	batch := flag.Int("batch", 512, "batch size (split over a stage's replicas)")
	nodesFlag := flag.String("nodes", "2,4", "node counts of the distributed runs")
	catalogPath := flag.String("catalog", "config/examples/catalogs/local.toml", "catalog whose cpu-1t type the nodes offer")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	stop, err := cpuprof.Start(*cpuProfile)
	if err == nil {
		err = run(*steps, *batch, *nodesFlag, *catalogPath, os.Stdout)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/dist/run:", err)
		os.Exit(1)
	}
}

func run(steps, batch int, nodesFlag, catalogPath string, w io.Writer) error {
	var counts []int
	for _, s := range strings.Split(nodesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("--nodes %q: want counts >= 1", nodesFlag)
		}
		counts = append(counts, n)
	}
	base, err := config.LoadCatalog(catalogPath)
	if err != nil {
		return err
	}
	unit, ok := base.Type(unitType)
	if !ok {
		return fmt.Errorf("%s has no type %s", catalogPath, unitType)
	}
	model, err := config.LoadModel(modelName)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "bench/dist/run: %s on %s, batch %d, %d steps, BSP; %d CPUs; %s\n\n", modelName, dataSpec, batch, steps,
		runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))

	single := map[int]float64{}
	for _, threads := range []int{1, 2} {
		rate, err := singleProcess(model, threads, batch, steps)
		if err != nil {
			return fmt.Errorf("single process, %d threads: %w", threads, err)
		}
		single[threads] = rate
		fmt.Fprintf(w, "single process (nn.Trainer), %d thread(s): %8.0f samples/s\n", threads, rate)
	}
	ref := max(single[1], single[2])
	fmt.Fprintln(w)
	var stageLines []string
	for _, n := range counts {
		cat := &config.Catalog{Version: 1, Name: "bench", Types: []config.CatalogType{unit}}
		cat.Types[0].MaxUnits = n
		res, err := distributed(cat, model, n, batch, steps)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		wall := float64(res.Step) * float64(batch) / res.seconds
		fmt.Fprintf(w, "%d nodes (%dx %s), plan limit %.0f: %8.0f samples/s measured, %8.0f wall (incl. start), %.2fx the faster single process, loss %.4f\n",
			n, n, unitType, res.limit, res.SamplesPerS, wall, res.SamplesPerS/ref, res.Loss)
		for _, st := range res.Stages {
			stageLines = append(stageLines, fmt.Sprintf("%5d  %5d  %-7s %5d  %10.0f  %10.0f  %6.3f",
				n, st.Stage, st.Type, st.Units, st.PredictedThroughput, st.MeasuredThroughput, st.MeasuredThroughput/st.PredictedThroughput))
		}
	}
	fmt.Fprintln(w, "\nper stage: measured throughput against the cost model's prediction (roofline estimates from the catalog)")
	fmt.Fprintln(w, "nodes  stage  type    units   predicted    measured   ratio")
	for _, l := range stageLines {
		fmt.Fprintln(w, l)
	}
	return nil
}

// singleProcess trains with nn.Trainer, reading the next batch while a
// step runs, and returns samples/s after the first step.
func singleProcess(model *config.Model, threads, batch, steps int) (float64, error) {
	backend, err := native.NewCPU(native.CPUOptions{Threads: threads})
	if err != nil {
		return 0, err
	}
	tr, err := nn.NewTrainer(backend, model, 1, int64(steps))
	if err != nil {
		return 0, err
	}
	src, err := data.Open(dataSpec, data.Options{Vocab: model.Input.Vocab, Split: data.SplitTrain})
	if err != nil {
		return 0, err
	}
	defer src.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type next struct {
		b   *data.Batch
		err error
	}
	batches := make(chan next, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		defer close(batches)
		for range steps {
			b, err := src.Next(ctx, batch)
			select {
			case batches <- next{b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	})
	var start time.Time
	samples := 0
	for i := 0; i < steps; i++ {
		nb, ok := <-batches
		if !ok {
			return 0, errors.New("data ended")
		}
		if nb.err != nil {
			return 0, nb.err
		}
		if _, err := tr.Step(nb.b); err != nil {
			return 0, err
		}
		if i == 0 {
			start = time.Now()
		} else {
			samples += nb.b.Size
		}
	}
	return float64(samples) / time.Since(start).Seconds(), nil
}

type result struct {
	api.JobStatus
	limit   float64
	seconds float64
}

// distributed runs the job on a coordinator and n node daemons in this
// process, as `heterps run` does with child processes.
func distributed(cat *config.Catalog, model *config.Model, n, batch, steps int) (*result, error) {
	limit, err := limitFor(cat, model, n, batch, steps)
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	c, err := coord.New(coord.Config{Catalog: cat, HeartbeatInterval: 200 * time.Millisecond, Logger: quiet})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { c.Serve(ctx, ln) })
	url := "http://" + ln.Addr().String()
	for i := range n {
		a, err := node.New(node.Config{Name: fmt.Sprintf("node%d", i), Coordinator: url, Listen: "127.0.0.1:0",
			PSListen: "127.0.0.1:0", Type: cat.Types[0].Name, Units: 1, Threads: 1, Plain: true, Logger: quiet})
		if err != nil {
			return nil, err
		}
		wg.Go(func() { a.Run(ctx) })
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	if err := waitNodes(ctx, client, url, n); err != nil {
		return nil, err
	}
	job := fmt.Sprintf("version = 1\nname = \"bench-%d\"\nmodel = %q\ndata = %q\nbatch = %d\nsteps = %d\nthroughput_limit = %g\nmethod = \"exact\"\nmode = \"bsp\"\nseed = 1\n",
		n, modelName, dataSpec, batch, steps, limit)
	var sub api.SubmitResponse
	if err := call(ctx, client, http.MethodPost, url+"/v1/jobs", api.ContentTypeTOML, job, &sub); err != nil {
		return nil, err
	}
	for {
		var s api.JobStatus
		if err := call(ctx, client, http.MethodGet, url+"/v1/jobs/"+sub.JobID, "", "", &s); err != nil {
			return nil, err
		}
		if s.State.Final() {
			if s.State != api.JobDone {
				return nil, fmt.Errorf("job %s: %s", s.State, s.Reason)
			}
			return &result{JobStatus: s, limit: limit, seconds: s.Finished.Sub(*s.Started).Seconds()}, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// limitFor finds a throughput floor at which the exact plan of the job
// uses exactly n units (bisection on a log scale: more units for a higher
// floor).
func limitFor(cat *config.Catalog, model *config.Model, n, batch, steps int) (float64, error) {
	units := func(limit float64) (int, error) {
		jf, err := config.ParseJob("bench.toml", fmt.Appendf(nil,
			"version = 1\nmodel = %q\ndata = %q\nbatch = %d\nsteps = %d\nthroughput_limit = %g\nmethod = \"exact\"\n",
			modelName, dataSpec, batch, steps, limit))
		if err != nil {
			return 0, err
		}
		p, err := coord.JobProblem(jf, model, cat)
		if err != nil {
			return 0, err
		}
		plan, err := sched.Run(context.Background(), "exact", p, sched.Options{Seed: 1})
		if err != nil {
			return 0, err
		}
		if !plan.Feasible {
			return math.MaxInt, nil
		}
		total := 0
		for _, s := range plan.Stages {
			total += s.Units
		}
		return total, nil
	}
	lo, hi := 1.0, 1e9
	for range 200 {
		mid := math.Sqrt(lo * hi)
		u, err := units(mid)
		if err != nil {
			return 0, err
		}
		switch {
		case u == n:
			return mid, nil
		case u < n:
			lo = mid
		default:
			hi = mid
		}
	}
	return 0, fmt.Errorf("no throughput floor makes the plan use exactly %d units", n)
}

func waitNodes(ctx context.Context, client *http.Client, url string, n int) error {
	for {
		var nodes []api.NodeStatus
		if err := call(ctx, client, http.MethodGet, url+"/v1/nodes", "", "", &nodes); err == nil && len(nodes) >= n {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for %d nodes: %w", n, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
