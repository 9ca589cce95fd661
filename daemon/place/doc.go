// Package place places the ops of one training step on the devices of one
// machine (Mirhoseini et al., "Device Placement Optimization with
// Reinforcement Learning", ICML 2017): op graphs of a model's forward and
// backward step built from its config (graph.go) and two synthetic graphs
// shaped like the paper's (synth.go), device sets (devices.go), an
// event-driven simulator of a placement (sim.go) with per-op times from a
// roofline or measured with the real kernels (measure.go), and the placement
// methods single, expert, mincut, exact and rl (methods.go, mincut.go,
// exact.go, rl.go, seq2seq.go).
//
// Layout rule: place imports only native and config of heterps.
package place
