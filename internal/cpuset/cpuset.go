// Package cpuset reads the CPUs this process may run on and pins the
// whole process to some of them: a node daemon's cpus (heterpsd), and
// the CPUs `heterps run` deals to its daemons; and it pins one thread to
// one CPU (a device of package place). Linux only; elsewhere Allowed
// knows none and Pin, PinThread and Check refuse.
package cpuset
