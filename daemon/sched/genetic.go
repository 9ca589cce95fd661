package sched

import (
	"context"
	"math/rand/v2"
	"slices"
)

func init() {
	Register("genetic", "genetic algorithm over assignments (tournament selection, one-point crossover, point and block mutation)", newGenetic)
}

// Genetic algorithm settings; Options.Budget overrides the evaluations.
const (
	geneticPopulation  = 40
	geneticEvaluations = 3000
	geneticGenerations = 300
	geneticStall       = 40 // generations without improvement before stopping
	geneticElite       = 2
)

func newGenetic(o Options) Method {
	return methodFunc(func(ctx context.Context, p *Problem) (*Plan, error) {
		budget := o.Budget
		if budget <= 0 {
			budget = geneticEvaluations
		}
		g := &genetic{p: p, e: newEvaluator(p, o.Provision), r: rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))}
		pop := g.initial()
		best, stall := g.e.cost(pop[0]), 0
		for gen := 0; gen < geneticGenerations && g.e.count < budget && stall < geneticStall; gen++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			pop = g.next(pop)
			if c := g.e.cost(pop[0]); c < best {
				best, stall = c, 0
			} else {
				stall++
			}
		}
		return g.e.plan(pop[0]), nil
	})
}

type genetic struct {
	p *Problem
	e *evaluator
	r *rand.Rand
}

// initial is every single-type assignment (as many as fit) and random
// block-structured ones, sorted by cost.
func (g *genetic) initial() [][]int {
	n, nt := len(g.p.Layers), len(g.p.Types)
	var pop [][]int
	for t := 0; t < nt && len(pop) < geneticPopulation/2; t++ {
		pop = append(pop, uniform(n, t))
	}
	for len(pop) < geneticPopulation {
		pop = append(pop, randomBlocks(g.r, n, nt))
	}
	g.sort(pop)
	return pop
}

// sort orders the population by cost, cheapest (then feasible) first.
func (g *genetic) sort(pop [][]int) {
	slices.SortStableFunc(pop, func(a, b []int) int {
		ca, cb := g.e.cost(a), g.e.cost(b)
		switch {
		case ca < cb:
			return -1
		case ca > cb:
			return 1
		}
		return 0
	})
}

func (g *genetic) next(pop [][]int) [][]int {
	next := slices.Clone(pop[:geneticElite])
	for len(next) < len(pop) {
		a, b := g.tournament(pop), g.tournament(pop)
		child := slices.Clone(a)
		if g.r.Float64() < 0.9 {
			cut := g.r.IntN(len(a) + 1)
			copy(child[cut:], b[cut:])
		}
		g.mutate(child)
		next = append(next, child)
	}
	g.sort(next)
	return next
}

// tournament returns the cheapest of three random members.
func (g *genetic) tournament(pop [][]int) []int {
	best := pop[g.r.IntN(len(pop))]
	for range 2 {
		if c := pop[g.r.IntN(len(pop))]; g.e.cost(c) < g.e.cost(best) {
			best = c
		}
	}
	return best
}

// mutate changes one layer's type, or sets a run of layers to one type
// (which creates or moves a stage boundary).
func (g *genetic) mutate(a []int) {
	nt := len(g.p.Types)
	if g.r.Float64() < 0.5 {
		a[g.r.IntN(len(a))] = g.r.IntN(nt)
	}
	if g.r.Float64() < 0.3 {
		mutateBlock(g.r, a, nt)
	}
}

func mutateBlock(r *rand.Rand, a []int, nt int) {
	i, j := r.IntN(len(a)), r.IntN(len(a))
	if i > j {
		i, j = j, i
	}
	t := r.IntN(nt)
	for l := i; l <= j; l++ {
		a[l] = t
	}
}

// randomBlocks is an assignment of a few random runs of random types.
func randomBlocks(r *rand.Rand, n, nt int) []int {
	a := uniform(n, r.IntN(nt))
	for range 1 + r.IntN(3) {
		mutateBlock(r, a, nt)
	}
	return a
}
