package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/internal/cpuset"
)

func replicaSetup(t *testing.T, sync, data string) stageSetup {
	cfg, err := config.LoadModel("ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	return stageSetup{model: cfg, modelRef: "ctrdnn", data: data, batch: 64, denseSync: sync, warmup: 1, steps: 2,
		backend: cpuUnits(1), unitArgs: []string{"--unit-threads", "1"}}
}

// Each replica of a process run trains in a process of its own, as node
// daemons do, and the run times its steps as the in-process one does.
func TestStageRunProcessesGivesEachReplicaAProcess(t *testing.T) {
	for _, sync := range []string{config.DenseSyncPS, config.DenseSyncAllreduce} {
		st, err := stageRunProcesses(context.Background(), replicaSetup(t, sync, "synthetic:1"), 2)
		if err != nil {
			t.Fatalf("%s: %v", sync, err)
		}
		if st.k != 2 || st.step <= 0 || len(st.replicas) != 2 || st.replicas[0].Samples != 32 || st.replicas[1].Samples != 32 {
			t.Errorf("%s: %d replicas, %g s a step, results %+v; want 2 of 32 rows", sync, st.k, st.step, st.replicas)
		}
		pids := slices.Clone(st.pids)
		slices.Sort(pids)
		if len(slices.Compact(pids)) != 2 || slices.Contains(st.pids, os.Getpid()) || slices.Contains(st.pids, 0) {
			t.Errorf("%s: replicas ran in processes %v (this one is %d), want two others", sync, st.pids, os.Getpid())
		}
	}
}

// Pinned, the replica processes run on the CPUs heterps run would deal
// its node daemons, and where several wait on each other, their steps run
// on a thread niced by compute_nice's default, as heterpsd runs a stage;
// unpinned, neither.
func TestStageRunProcessesPinAsHeterpsRunDoes(t *testing.T) {
	allowed, err := cpuset.Allowed()
	if err != nil || len(allowed) < 2 {
		t.Skipf("needs 2 CPUs to pin to: %v %v", allowed, err)
	}
	base, err := cpuset.ThreadNice(0)
	if err != nil {
		t.Skipf("no thread nice: %v", err)
	}
	s := replicaSetup(t, config.DenseSyncAllreduce, "synthetic:1")
	s.pinThreads = 1
	for _, k := range []int{1, 2} {
		st, err := stageRunProcesses(context.Background(), s, k)
		if err != nil {
			t.Fatal(err)
		}
		for i := range k {
			wantNice := -1
			if k > 1 {
				wantNice = min(base+config.DefaultComputeNice, 19)
			}
			if want := strconv.Itoa(allowed[i]); st.cpus[i] != want || st.nices[i] != wantNice {
				t.Errorf("k=%d replica %d: CPUs %q, steps at nice %d; want CPUs %s, nice %d", k, i, st.cpus[i], st.nices[i], want, wantNice)
			}
		}
	}
	s.pinThreads = 0
	st, err := stageRunProcesses(context.Background(), s, 2)
	if err != nil {
		t.Fatal(err)
	}
	if st.cpus[0] != "" || st.cpus[1] != "" || st.nices[0] != -1 || st.nices[1] != -1 {
		t.Errorf("unpinned: CPUs %q, nices %v; want none", st.cpus, st.nices)
	}
}

// A replica that fails ends the run at once, naming it and why; the
// others, waiting on its pushes, are stopped with it.
func TestStageRunProcessesReportsAFailedReplica(t *testing.T) {
	start := time.Now()
	_, err := stageRunProcesses(context.Background(), replicaSetup(t, config.DenseSyncPS, "nosuch:1"), 2)
	if err == nil || !strings.Contains(err.Error(), "replica") || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("got %v, want the replica and the data it could not open", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v to report it", d)
	}
}

// A replica whose parent goes away (its stdin ends) stops training instead
// of waiting out the step timeouts for peers that will never come.
func TestProfileReplicaStopsWhenItsParentGoes(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- profileReplica([]string{"--model", "ctrdnn", "--data", "synthetic:1", "--batch", "64", "--steps", "50",
			"--replicas", "2", "--replica", "0"}, inR, json.NewEncoder(outW))
		outW.Close()
	}()
	dec := json.NewDecoder(outR)
	var hello replicaHello
	if err := dec.Decode(&hello); err != nil || hello.PS == "" {
		t.Fatalf("hello %+v, %v; want the server's address", hello, err)
	}
	go io.Copy(io.Discard, outR)
	peers, _ := json.Marshal(replicaPeers{PS: hello.PS})
	inW.Write(append(peers, '\n'))
	time.Sleep(200 * time.Millisecond) // replica 0 steps, waiting on replica 1
	inW.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the replica reported success without its peer")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the replica kept training after its parent went")
	}
}

func TestReplicaFlagsRefuseOutOfRange(t *testing.T) {
	for _, args := range [][]string{
		{"--replicas", "2", "--replica", "2", "--batch", "8", "--steps", "1"},
		{"--replicas", "4", "--replica", "0", "--batch", "2", "--steps", "1"},
		{"--replicas", "1", "--replica", "0", "--batch", "8", "--steps", "0"},
		{"--replicas", "1", "--replica", "0", "--batch", "8", "--steps", "1", "--dense-sync", "auto"},
		{"--replicas", "1", "--replica", "0", "--batch", "8", "--steps", "1", "--cpus", "0-x"},
		{"--replicas", "1", "--replica", "0", "--batch", "8", "--steps", "1", "--compute-nice", "20"},
		{"--replicas", "1", "--replica", "0", "--batch", "8", "--steps", "1", "--compute-nice", "-1"},
	} {
		if _, err := parseReplicaFlags(args); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
