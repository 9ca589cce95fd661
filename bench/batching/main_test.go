package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func defaultLists() flagLists {
	return flagLists{models: strings.Join(modelNames, ","), syncs: "bsp,asp", levels: "1,2,4,6", modes: "uniform,variable,dynamic",
		digits: "../../daemon/data/testdata/digits.csv.gz"}
}

func defaultOptions() options {
	return options{targetAt: 0.8, emaWeight: 0.1, resize: resizeRestart, out: "bench/results/batching.txt", heartbeat: time.Second}
}

func TestParseOptionsTakesEveryModelSyncModeAndHLevel6(t *testing.T) {
	o := defaultOptions()
	if err := parseOptions(&o, defaultLists()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.levels, []int{1, 2, 4, 6}) || !slices.Equal(o.syncs, []string{"bsp", "asp"}) {
		t.Errorf("levels %v, syncs %v; want 1,2,4,6 and bsp,asp", o.levels, o.syncs)
	}
	var names []string
	for _, m := range o.models {
		names = append(names, m.name)
	}
	if !slices.Equal(names, modelNames) {
		t.Errorf("models %v, want %v", names, modelNames)
	}
	digits := o.models[1].data
	if !strings.HasPrefix(digits, "digits:/") || !strings.HasSuffix(digits, "digits.csv.gz") {
		t.Errorf("mlp-digits data %q: want digits: and the CSV's absolute path (the nodes open it)", digits)
	}
	if o.curves != "bench/results/batching-curves.csv" {
		t.Errorf("curves %q: want next to --out", o.curves)
	}
}

func TestParseOptionsOverridesEachModelsStepsAndBatch(t *testing.T) {
	o := defaultOptions()
	o.steps, o.batch = 40, 64
	if err := parseOptions(&o, defaultLists()); err != nil {
		t.Fatal(err)
	}
	for _, m := range o.models {
		if m.steps != 40 || m.batch != 64 {
			t.Errorf("%s: %d steps of %d, want 40 of 64", m.name, m.steps, m.batch)
		}
	}
	if models["ctrdnn"].steps == 40 {
		t.Error("the override changed the defaults table")
	}
}

func TestParseOptionsRefuses(t *testing.T) {
	for name, change := range map[string]func(*options, *flagLists){
		"unknown model":      func(o *options, l *flagLists) { l.models = "ctrdnn,resnet" },
		"unknown sync":       func(o *options, l *flagLists) { l.syncs = "bsp,ssp" },
		"H-level 3":          func(o *options, l *flagLists) { l.levels = "1,3" },
		"unknown resize":     func(o *options, l *flagLists) { o.resize = "migrate" },
		"missing digits":     func(o *options, l *flagLists) { l.digits = filepath.Join(t.TempDir(), "none.csv") },
		"too few steps":      func(o *options, l *flagLists) { o.steps = 5 },
		"negative every":     func(o *options, l *flagLists) { o.every = -1 },
		"short interference": func(o *options, l *flagLists) { o.interSteps = 5 },
		"target fraction":    func(o *options, l *flagLists) { o.targetAt = 1.5 },
	} {
		o, l := defaultOptions(), defaultLists()
		change(&o, &l)
		if err := parseOptions(&o, l); err == nil {
			t.Errorf("%s: parseOptions accepted it", name)
		}
	}
}
