// Command wirebw measures tensor transfer bandwidth between two daemon/wire
// transports over loopback against raw loopback TCP, in the same run.
//
// For each message size it sends the same bytes three ways, in interleaved
// rounds, and keeps each one's best round:
//
//	raw        one TCP connection; the sender writes size bytes per message,
//	           the receiver io.ReadFulls them into one reused buffer
//	wire copy  two authenticated TCPTransports (HMAC handshake, CRC32C
//	           frames); each message is one float32 tensor of size bytes,
//	           which the receiver decodes into one reused []float32
//	wire view  the same, but the receiver uses the tensor in place
//	           (Float32View) instead of copying it out
//	wire TLS   wire copy over mutual TLS 1.3 (certificates of a cluster CA
//	           made for the run) instead of the HMAC handshake
//
// Receivers release each message after use, so frames are recycled. MB/s
// counts tensor bytes (1 MB = 1e6 bytes). It prints a table and asserts
// nothing (the target is wire >= 0.7 x raw from 1 MiB up).
//
// A second table is the host's wake-up latency (wake.go): the round trip
// of a small message to a child process that has idled for a while, as a
// BSP replica waits on its peers several times a step.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/heterps/heterps/bench/internal/header"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/daemon/wire/pki"
	"github.com/heterps/heterps/internal/cpuprof"
	"github.com/heterps/heterps/native"
)

func main() {
	native.FixOpenBLASCore() // the header's host speed is of the GEMM kernels heterps runs
	budget := flag.Int("budget", 128<<20, "bytes sent per size and round")
	rounds := flag.Int("rounds", 3, "rounds per size; the best counts")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile to this file")
	outPath := flag.String("out", "", header.OutUsage)
	echo := flag.String("echo-child", "", "internal: serve wake-up round trips on this abstract Unix socket")
	flag.Parse()
	if *echo != "" {
		serveEcho(*echo)
		return
	}
	res, err := header.Begin(*outPath, header.Collect("bench/dist/wirebw"))
	if err == nil {
		output = res
		var stop func()
		if stop, err = cpuprof.Start(*cpuProfile); err == nil {
			err = run(*budget, *rounds)
			stop()
		}
	}
	if err == nil {
		err = res.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wirebw:", err)
		os.Exit(1)
	}
}

// output is where the table goes: stdout, and the results file with --out.
var output io.Writer = os.Stdout

var sizes = []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}

func run(budget, rounds int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	raw, err := newRawPair()
	if err != nil {
		return err
	}
	defer raw.close()
	w, err := newWirePair()
	if err != nil {
		return err
	}
	defer w.close()
	wt, err := newTLSPair()
	if err != nil {
		return err
	}
	defer wt.close()

	start := time.Now()
	fmt.Fprintf(output, "%8s %10s %10s %6s %10s %6s %10s %6s %8s\n", "size", "raw MB/s", "wire copy", "ratio", "wire view", "ratio", "wire TLS", "ratio", "TLS/copy")
	for _, size := range sizes {
		count := max(4, budget/size)
		// Warm up every path (buffers, pools, TCP windows) untimed.
		if _, err := raw.transfer(size, 2); err != nil {
			return err
		}
		for _, view := range []bool{false, true} {
			if _, err := w.transfer(ctx, size, 2, view); err != nil {
				return err
			}
		}
		if _, err := wt.transfer(ctx, size, 2, false); err != nil {
			return err
		}
		var bestRaw, bestCopy, bestView, bestTLS time.Duration
		for range rounds {
			d, err := raw.transfer(size, count)
			if err != nil {
				return err
			}
			bestRaw = best(bestRaw, d)
			if d, err = w.transfer(ctx, size, count, false); err != nil {
				return err
			}
			bestCopy = best(bestCopy, d)
			if d, err = w.transfer(ctx, size, count, true); err != nil {
				return err
			}
			bestView = best(bestView, d)
			if d, err = wt.transfer(ctx, size, count, false); err != nil {
				return err
			}
			bestTLS = best(bestTLS, d)
		}
		rawMBs, copyMBs, viewMBs, tlsMBs := mbps(size*count, bestRaw), mbps(size*count, bestCopy), mbps(size*count, bestView), mbps(size*count, bestTLS)
		fmt.Fprintf(output, "%8s %10.0f %10.0f %6.2f %10.0f %6.2f %10.0f %6.2f %8.2f\n", human(size), rawMBs, copyMBs, copyMBs/rawMBs,
			viewMBs, viewMBs/rawMBs, tlsMBs, tlsMBs/rawMBs, tlsMBs/copyMBs)
	}
	fmt.Fprintf(output, "(%d rounds per size, best of each; %v in all)\n", rounds, time.Since(start).Round(time.Millisecond))
	return measureWake(ctx)
}

func best(cur, d time.Duration) time.Duration {
	if cur == 0 || d < cur {
		return d
	}
	return cur
}

func mbps(bytes int, d time.Duration) float64 { return float64(bytes) / d.Seconds() / 1e6 }

func human(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// rawPair is a plain loopback TCP connection.
type rawPair struct{ send, recv net.Conn }

func newRawPair() (*rawPair, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	send, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	recv := <-accepted
	if recv == nil {
		send.Close()
		return nil, errors.New("raw: accept failed")
	}
	return &rawPair{send: send, recv: recv}, nil
}

func (p *rawPair) close() {
	p.send.Close()
	p.recv.Close()
}

// transfer sends count messages of size bytes and returns the time from the
// first write to the receiver's acknowledgement of the last read.
func (p *rawPair) transfer(size, count int) (time.Duration, error) {
	data := make([]byte, size)
	received := make(chan error, 1)
	go func() {
		buf := make([]byte, size)
		for range count {
			if _, err := io.ReadFull(p.recv, buf); err != nil {
				received <- err
				return
			}
		}
		_, err := p.recv.Write([]byte{1})
		received <- err
	}()
	start := time.Now()
	for range count {
		if _, err := p.send.Write(data); err != nil {
			return 0, fmt.Errorf("raw: write: %w", err)
		}
	}
	var ack [1]byte
	if _, err := io.ReadFull(p.send, ack[:]); err != nil {
		return 0, fmt.Errorf("raw: ack: %w", err)
	}
	elapsed := time.Since(start)
	return elapsed, <-received
}

// wirePair is two transports, "a" sending to "b".
type wirePair struct{ a, b *wire.TCPTransport }

func newWirePair() (*wirePair, error) {
	secret := make([]byte, 32)
	rand.Read(secret)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, b, err := wire.LoopbackPair(secret, quiet)
	if err != nil {
		return nil, err
	}
	return &wirePair{a: a, b: b}, nil
}

// newTLSPair is a wirePair over mutual TLS with a CA made for the run.
func newTLSPair() (*wirePair, error) {
	dir, err := os.MkdirTemp("", "wirebw-tls")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ca, err := pki.NewCA("wirebw", time.Now(), time.Hour)
	if err != nil {
		return nil, err
	}
	pair, err := pki.Issue(ca, "loopback", []string{"127.0.0.1"}, time.Now(), time.Hour)
	if err != nil {
		return nil, err
	}
	caPath, _, err := pki.Write(ca, dir, "ca")
	if err != nil {
		return nil, err
	}
	cert, key, err := pki.Write(pair, dir, "loopback")
	if err != nil {
		return nil, err
	}
	cfg, err := wire.LoadTLS(cert, key, caPath)
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, b, err := wire.LoopbackPairWith(wire.Config{TLS: cfg, Logger: quiet})
	if err != nil {
		return nil, err
	}
	return &wirePair{a: a, b: b}, nil
}

func (p *wirePair) close() {
	p.a.Close()
	p.b.Close()
}

const (
	dataStream = 1
	ackStream  = 2
)

// transfer sends count one-tensor messages of size bytes a -> b and returns
// the time from the first send to b's acknowledgement of the last one. The
// receiver copies each tensor into a reused buffer, or with view uses it in
// place.
func (p *wirePair) transfer(ctx context.Context, size, count int, view bool) (time.Duration, error) {
	data := make([]float32, size/4)
	msg := &wire.Message{Type: wire.MsgActivation, Tensors: []wire.Tensor{wire.F32Tensor(data, 1, len(data))}}
	received := make(chan error, 1)
	go func() { received <- p.receive(ctx, len(data), count, view) }()
	start := time.Now()
	for i := range count {
		msg.Meta.Step = uint64(i)
		if err := p.a.Send(ctx, "b", dataStream, msg); err != nil {
			return 0, fmt.Errorf("wire: send: %w", err)
		}
	}
	if _, err := p.a.Recv(ctx, "b", ackStream); err != nil {
		return 0, fmt.Errorf("wire: ack: %w", err)
	}
	elapsed := time.Since(start)
	return elapsed, <-received
}

// receive takes count messages of n floats on b and acknowledges them.
func (p *wirePair) receive(ctx context.Context, n, count int, view bool) error {
	dst := make([]float32, n)
	var sum float32
	for range count {
		m, err := p.b.Recv(ctx, "a", dataStream)
		if err != nil {
			return err
		}
		t := &m.Tensors[0]
		if view {
			v, ok := t.Float32View()
			if !ok {
				return errors.New("wire: tensor cannot be used in place on this host")
			}
			sum += v[len(v)-1] // touch it, as a consumer would
		} else if dst, err = t.Float32s(dst); err != nil {
			return err
		}
		m.Release()
	}
	_ = sum
	return p.b.Send(ctx, "a", ackStream, &wire.Message{Type: wire.MsgAck})
}
