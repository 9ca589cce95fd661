// Package node is the node role of heterpsd: it takes the inventory of its
// machine (cores and memory through gopsutil, GPUs through the CUDA driver
// when built with -tags cuda), registers with the coordinator, sends
// heartbeats that report its tasks, and runs the tasks the coordinator
// assigns in the replies: pipeline stage workers and parameter-server
// shards.
package node
