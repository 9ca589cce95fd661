package place

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/heterps/heterps/config"
)

// Synthetic graph names LoadGraph knows besides the model zoo.
const (
	SyntheticNMT       = "nmt-like"
	SyntheticInception = "inception-like"
)

// LoadGraph builds the step graph of a zoo model or model file at the given
// batch, or one of the synthetic graphs (their batch is their own).
func LoadGraph(nameOrPath string, batch int) (*Graph, error) {
	switch nameOrPath {
	case SyntheticNMT:
		return NMTGraph(DefaultNMT)
	case SyntheticInception:
		return InceptionGraph(DefaultInception)
	}
	m, err := config.LoadModel(nameOrPath)
	if err != nil {
		return nil, err
	}
	return FromModel(m, batch)
}

// GraphNames lists what LoadGraph accepts by name.
func GraphNames() []string {
	return append(config.ZooNames(), SyntheticNMT, SyntheticInception)
}

// ErrTooLarge is wrapped by exact when the graph has too many placements.
var ErrTooLarge = errors.New("too many placements to enumerate")

// Row is one method's line of a comparison: its outcome, or why it did not
// run (exact on a graph too large to enumerate).
type Row struct {
	Method   string
	Outcome  *Outcome
	Skipped  string
	FromBest float64 // cost / the best cost of the comparison, minus 1
}

// Compare runs the methods on s and sets each row's distance from the best
// cost found.
func Compare(ctx context.Context, s *Simulator, names []string, o Options) ([]Row, error) {
	rows := make([]Row, 0, len(names))
	best := math.Inf(1)
	for _, name := range names {
		out, err := Place(ctx, name, s, o)
		if errors.Is(err, ErrTooLarge) {
			rows = append(rows, Row{Method: name, Skipped: strings.TrimPrefix(err.Error(), fmt.Sprintf("place: %s on %s: ", name, s.g.Name))})
			continue
		}
		if err != nil {
			return nil, err
		}
		best = math.Min(best, out.Result.Cost)
		rows = append(rows, Row{Method: name, Outcome: out})
	}
	for i := range rows {
		if rows[i].Outcome != nil {
			rows[i].FromBest = rows[i].Outcome.Result.Cost/best - 1
		}
	}
	return rows, nil
}

// ParseMethods turns "all" or a comma-separated list into method names.
func ParseMethods(s string) ([]string, error) {
	if s == "all" {
		return Methods(), nil
	}
	var names []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if _, ok := methods[n]; !ok {
			return nil, fmt.Errorf("unknown method %q (want all or some of %s)", n, strings.Join(Methods(), ", "))
		}
		names = append(names, n)
	}
	return names, nil
}

// GroupDevices is each group's device under a placement, or -1 for a group
// whose ops are on several devices.
func GroupDevices(g *Graph, placement []int) []int {
	dev := make([]int, len(g.Groups))
	for i := range dev {
		dev[i] = -2
	}
	for i, op := range g.Ops {
		switch dev[op.Group] {
		case -2:
			dev[op.Group] = placement[i]
		case placement[i]:
		default:
			dev[op.Group] = -1
		}
	}
	return dev
}
