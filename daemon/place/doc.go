// Package place places the ops of one training step on the devices of one
// machine (Mirhoseini et al., "Device Placement Optimization with
// Reinforcement Learning", ICML 2017): op graphs of a model's forward and
// backward step built from its config (graph.go) and two synthetic graphs
// shaped like the paper's (synth.go), device sets (devices.go) from a
// devices file or a node's inventory (inventory.go), an event-driven
// simulator of a placement (sim.go) with per-op times from a roofline or
// measured with the real kernels, alone or inside a step (measure.go), the
// placement methods single, expert, mincut, exact and rl (methods.go,
// mincut.go, rl.go, seq2seq.go), Compare, which runs several and measures
// each against the best (compare.go), and Execute, which runs a placement's
// step for real on this machine's CPU devices (execute.go).
//
// The co-location groups follow the paper's rules as TensorFlow colocates
// ops: a layer's forward and backward ops form a group, a dense layer's
// weights with their optimiser update another, an embedding's lookups stay
// with its table. Methods place whole groups (expert places single ops).
//
// Layout rule: place imports only native and config of heterps.
package place
