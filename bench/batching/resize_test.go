package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
)

func resizeRun(r string) *trace {
	m := models["ctrdnn"]
	return &trace{part: partResize, model: m, sync: syncBSP, level: resizeLevel, shares: sharePairs[resizeLevel], mode: config.BatchingDynamic, resize: r}
}

func TestResizeReportShowsTheConfigErrorOfAFailedRestartRun(t *testing.T) {
	in := resizeRun(resizeInPlace)
	in.started, in.finished = t0, t0.Add(20*time.Second)
	in.samples = jobSamples("a", 0, t0, 10, 20, 30)
	re := resizeRun(resizeKillRestart)
	re.err = errors.New(`submit: job.toml:12:10: batching.resize: "restart": only "in-place" is built`)
	var buf bytes.Buffer
	printResize(&buf, []*trace{in, re}, options{})
	printResizeTarget(&buf, []*trace{in, re})
	out := buf.String()
	if !strings.Contains(out, `restart   FAILED: submit: job.toml:12:10: batching.resize`) {
		t.Errorf("the report does not show the restart run's error:\n%s", out)
	}
	if !strings.Contains(out, "kill-restart: not measured") {
		t.Errorf("the target line does not say kill-restart was not measured:\n%s", out)
	}
}

func TestResizeTargetComparesWithTheRestartRunsCost(t *testing.T) {
	in := resizeRun(resizeInPlace)
	in.started, in.finished = t0, t0.Add(100*time.Second)
	in.samples = jobSamples("a", 0, t0, 10, 20, 30)
	re := resizeRun(resizeKillRestart)
	re.started, re.finished = t0, t0.Add(110*time.Second)
	re.samples = append(jobSamples("a", 0, t0, 10, 20), jobSamples("b", 15, t0.Add(4*time.Second), 15, 25)...)
	var buf bytes.Buffer
	printResizeTarget(&buf, []*trace{in, re})
	want := "kill-restart: +10.0 s wall (+10.0 %), 1 restarts, 5 steps trained twice, 4.0 s in gaps: met" // a last stepped at 1 s, b at 5 s
	if !strings.Contains(buf.String(), want) {
		t.Errorf("target line:\n%s\nwant it to contain %q", buf.String(), want)
	}
}
