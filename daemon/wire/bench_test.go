package wire

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkConn measures one Conn's tensor throughput over loopback: the
// receiver decodes each tensor into a reused buffer and releases the frame.
// The peers meet on a same-host socket and share memory (shm), take it
// with Recv (copied out of the ring) or RecvShared (read in it), or keep
// payloads in the socket (no-shm). bench/dist/wirebw compares the same
// path against raw TCP.
func BenchmarkConn(b *testing.B) {
	for _, size := range []int{4 << 10, 16 << 10, 64 << 10, 1 << 20} {
		for _, way := range []string{"no-shm", "shm", "shm-in-place"} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, way), func(b *testing.B) { benchmarkConn(b, size, way) })
		}
	}
}

func benchmarkConn(b *testing.B, size int, way string) {
	logs := &logSink{}
	cfg := testConfig("server", logs)
	cfg.NoSharedMemory = way == "no-shm"
	ln, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ctx := context.Background()
	client, err := Dial(ctx, ln.Addr().String(), testConfig("client", logs), "")
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer server.Close()

	data := make([]float32, size/4)
	msg := &Message{Type: MsgActivation, Tensors: []Tensor{F32Tensor(data, len(data))}}
	received := make(chan error, 1)
	go func() {
		dst := make([]float32, len(data))
		for range b.N {
			recv := server.Recv
			if way == "shm-in-place" {
				recv = server.RecvShared
			}
			m, err := recv(ctx, 1)
			if err == nil {
				dst, err = m.Tensors[0].Float32s(dst)
				m.Release()
			}
			if err != nil {
				received <- err
				return
			}
		}
		received <- nil
	}()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		if err := client.Send(ctx, 1, msg); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-received; err != nil {
		b.Fatal(err)
	}
}
