package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/heterps/heterps/internal/tether"
)

// The wake-up table. A BSP replica blocks on its peers several times a
// step (a pull that waits for their pushes, a ring piece), and a process
// that blocks for long lets its CPU idle: on a VM the hypervisor may then
// take the vCPU off its core, and the message that ends the wait first has
// to get it back. measureWake times that from outside: a child process
// echoes 64-byte messages over a Unix socket, and this one sleeps for a
// gap before each, so that the child has idled for the gap when the
// message reaches it. Loopback bandwidth says nothing about it; it is what
// small-batch data-parallel steps pay on top of their compute.

// wakeGaps are the idle times before a round trip.
var wakeGaps = []time.Duration{0, 100 * time.Microsecond, time.Millisecond, 5 * time.Millisecond}

// wakeTrips is how many round trips each gap gets.
const wakeTrips = 300

// measureWake starts the echo child and prints each gap's round-trip
// percentiles.
func measureWake(ctx context.Context) error {
	name := fmt.Sprintf("@heterps-wirebw-wake-%d", os.Getpid())
	ln, err := net.Listen("unix", name)
	if err != nil {
		return fmt.Errorf("wake: %w", err)
	}
	defer ln.Close()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("wake: %w", err)
	}
	child := exec.CommandContext(ctx, exe, "--echo-child", name)
	child.Stderr = os.Stderr
	if err := tether.Start(child); err != nil {
		return fmt.Errorf("wake: start the echo child: %w", err)
	}
	defer child.Wait()
	conn, err := acceptWithin(ln, 10*time.Second)
	if err != nil {
		child.Process.Kill()
		return fmt.Errorf("wake: the echo child never connected: %w", err)
	}
	defer conn.Close()
	fmt.Fprintf(output, "\nwake-up: round trip of 64 bytes to a child process over a Unix socket after it idled for a gap (%d trips a gap)\n", wakeTrips)
	fmt.Fprintf(output, "%8s %10s %10s %10s\n", "gap", "p50 us", "p90 us", "p99 us")
	for _, gap := range wakeGaps {
		trips, err := roundTrips(conn, gap)
		if err != nil {
			return fmt.Errorf("wake: gap %v: %w", gap, err)
		}
		fmt.Fprintf(output, "%8v %10.1f %10.1f %10.1f\n", gap, micros(pct(trips, 50)), micros(pct(trips, 90)), micros(pct(trips, 99)))
	}
	return nil
}

// acceptWithin accepts one connection on ln, or fails after d.
func acceptWithin(ln net.Listener, d time.Duration) (net.Conn, error) {
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetDeadline(time.Now().Add(d))
	}
	return ln.Accept()
}

// roundTrips times wakeTrips round trips on conn, each after sleeping gap.
func roundTrips(conn net.Conn, gap time.Duration) ([]time.Duration, error) {
	msg := make([]byte, 64)
	out := make([]time.Duration, 0, wakeTrips)
	for range wakeTrips {
		time.Sleep(gap)
		if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
			return nil, err
		}
		start := time.Now()
		if _, err := conn.Write(msg); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(conn, msg); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out, nil
}

// pct is the p-th percentile of sorted ds.
func pct(ds []time.Duration, p int) time.Duration { return ds[(len(ds)-1)*p/100] }

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// serveEcho is the child: it echoes 64-byte messages until the parent
// hangs up, or exits after a minute without one.
func serveEcho(name string) {
	conn, err := net.DialTimeout("unix", name, 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wirebw echo child:", err)
		os.Exit(1)
	}
	defer conn.Close()
	msg := make([]byte, 64)
	for {
		conn.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.ReadFull(conn, msg); err != nil {
			return
		}
		if _, err := conn.Write(msg); err != nil {
			return
		}
	}
}
