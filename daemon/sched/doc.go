// Package sched plans where a model's layers run and on how many units: it
// holds HeterPS' cost model (DESIGN.md, "Cost model") as pure functions of a
// Problem, the provisioning rules that give each pipeline stage its units,
// and the scheduling methods that assign layers to resource types, each a
// Method in a registry keyed by its --method name.
//
// A Problem is read-only input (built from a config.Problem); a Plan is the
// output, and carries everything needed to re-cost it: the type of every
// layer, the units of every stage and the parameter-server cores. Nothing here
// does I/O or keeps state between calls, so methods can be compared on the
// same Problem and tested against each other.
//
// The exact method is provably optimal under the cost model; see exact.go for
// the algorithm and the argument.
package sched
