package place

import (
	"fmt"
	"testing"

	"github.com/heterps/heterps/config"
)

// testDevice is a device with round numbers: flops FLOP/s, memory bytes,
// link bytes/s, no latencies to speak of.
func testDevice(name string, flops float64, memory int64, link float64) Device {
	return Device{Name: name, Kind: "gpu", PeakFLOPS: flops, MemBandwidth: 1e30, Memory: config.ByteSize(memory),
		LinkBandwidth: link, LinkLatency: 1e-12, LaunchLatency: 1e-12}
}

// chain is a graph of n ops, op i with flops[i] FLOPs reading op i-1,
// outputs of out bytes, each op its own group.
func chain(flops []float64, out int64) *Graph {
	g := &Graph{Name: "chain"}
	for i, f := range flops {
		op := Op{Name: fmt.Sprintf("op%d", i), Kind: KindMatMul, Group: i, FLOPs: f, Out: out}
		if i > 0 {
			op.Inputs = []int{i - 1}
		}
		g.Ops = append(g.Ops, op)
		g.Groups = append(g.Groups, op.Name)
	}
	return g
}

func newSim(t *testing.T, g *Graph, devs ...Device) *Simulator {
	t.Helper()
	s, err := NewSimulator(g, devs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func run(t *testing.T, s *Simulator, p []int) Result {
	t.Helper()
	r, err := s.Run(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
