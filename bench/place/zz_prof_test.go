package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/daemon/nn"
	"github.com/heterps/heterps/native"
)

func TestZZProf(t *testing.T) {
	name := os.Getenv("ZZP")
	if name == "" {
		t.Skip()
	}
	native.FixOpenBLASCore()
	be, _ := native.NewCPU(native.CPUOptions{Threads: 1})
	cfg, _ := config.LoadModel(name)
	src, err := data.Open(dataFor[name], data.Options{Vocab: cfg.Input.Vocab, Split: data.SplitTrain})
	if err != nil {
		t.Fatal(err)
	}
	bt, _ := src.Next(context.Background(), 512)
	tr, err := nn.NewTrainer(be, cfg, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	s := &nn.Step{Backend: be, Batch: bt, Train: true}
	times, err := tr.Model.ProfileLayers(s, 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range times {
		fmt.Printf("%-12s %-10s fwd %v bwd %v\n", l.Name, l.Kind, l.Forward, l.Backward)
	}
	best := time.Hour
	for range 20 {
		st := time.Now()
		tr.Gradients(s)
		g := time.Since(st)
		st = time.Now()
		tr.Opt.Apply(be, tr.Model.Params())
		a := time.Since(st)
		if g+a < best {
			best = g + a
			fmt.Println("grad", g, "apply", a)
		}
	}
}
