package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/coord"
	"github.com/heterps/heterps/daemon/node"
)

const dashboardPath = "../../../config/grafana/heterps.json"

// recorder is a Registerer that remembers what is registered with it.
type recorder struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// registeredNames lists every metric name a coordinator and a node
// register, whether or not they have series yet.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recorder{Registerer: prometheus.NewRegistry()}
	cat, err := config.LoadCatalog("testdata/catalog.toml")
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	c, err := coord.New(coord.Config{Catalog: cat, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterMetrics(rec); err != nil {
		t.Fatal(err)
	}
	a, err := node.New(node.Config{Name: "n", Coordinator: "http://127.0.0.1:1", Listen: "127.0.0.1:0", PSListen: "127.0.0.1:0",
		Type: "cpu", Units: 1, Plain: true, Logger: quiet, Metrics: rec})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil { // closes its listeners at once
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, col := range rec.collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() { col.Describe(ch); close(ch) }()
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the name of %s", d)
			}
			names[m[1]] = true
		}
	}
	return names
}

type dashboardPanel struct {
	Type    string           `json:"type"`
	Title   string           `json:"title"`
	Panels  []dashboardPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var metricName = regexp.MustCompile(`\bheterps_[a-z0-9_]+`)

// TestDashboardNamesRegisteredMetrics: the Grafana dashboard is valid
// JSON, and every panel's every expression names at least one heterps
// metric, each one the daemons register.
func TestDashboardNamesRegisteredMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string           `json:"title"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	registered := registeredNames(t)
	used := map[string]bool{}
	var check func(ps []dashboardPanel)
	check = func(ps []dashboardPanel) {
		for _, p := range ps {
			check(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, target := range p.Targets {
				names := metricName.FindAllString(target.Expr, -1)
				if len(names) == 0 {
					t.Errorf("panel %q: %q names no heterps metric", p.Title, target.Expr)
				}
				for _, n := range names {
					base := n
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						if b, ok := strings.CutSuffix(n, suffix); ok && registered[b] {
							base = b
						}
					}
					if !registered[base] {
						t.Errorf("panel %q: %s is not a metric the daemons register", p.Title, n)
					}
					used[base] = true
				}
			}
		}
	}
	check(dash.Panels)
	for n := range registered {
		if strings.HasPrefix(n, "heterps_") && !used[n] {
			t.Errorf("no panel shows %s", n)
		}
	}
}
