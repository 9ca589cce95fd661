package wire

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkConn measures one Conn's tensor throughput over loopback: the
// receiver decodes each tensor into a reused buffer and releases the frame.
// bench/dist/wirebw compares the same path against raw TCP.
func BenchmarkConn(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) { benchmarkConn(b, size) })
	}
}

func benchmarkConn(b *testing.B, size int) {
	logs := &logSink{}
	ln, err := Listen("127.0.0.1:0", testConfig("server", logs))
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
			m, err := server.Recv(ctx, 1)
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
