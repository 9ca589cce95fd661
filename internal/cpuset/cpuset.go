// Package cpuset reads the CPUs this process may run on and pins the
// whole process to some of them: a node daemon's cpus (heterpsd), and
// the CPUs `heterps run` deals to its daemons; and it pins one thread to
// one CPU (a device of package place); and it lowers one thread's
// priority (a stage's compute thread, which the threads that the network
// wakes should preempt). Linux only; elsewhere Allowed knows none and Pin,
// PinThread, Check and LowerThreadPriority refuse.
package cpuset
