package wire

import "log/slog"

// LoopbackPair returns two authenticated transports on 127.0.0.1 that know
// each other as peers "a" and "b", for measurements on one machine
// (heterps profile's transfer times, the bandwidth benchmark). The caller
// closes both.
func LoopbackPair(secret []byte, logger *slog.Logger) (a, b *TCPTransport, err error) {
	return LoopbackPairWith(Config{Secret: secret, Logger: logger})
}

// LoopbackPairWith is LoopbackPair with base's settings (its NodeID
// replaced by "a" and "b"), e.g. TLS instead of a secret.
func LoopbackPairWith(base Config) (a, b *TCPTransport, err error) {
	cfg := func(id string) Config { c := base; c.NodeID = id; return c }
	if b, err = NewTCPTransport("127.0.0.1:0", cfg("b")); err != nil {
		return nil, nil, err
	}
	if a, err = NewTCPTransport("127.0.0.1:0", cfg("a")); err != nil {
		b.Close()
		return nil, nil, err
	}
	if err = b.AddPeer("a", ""); err == nil {
		err = a.AddPeer("b", b.Addr().String())
	}
	if err != nil {
		a.Close()
		b.Close()
		return nil, nil, err
	}
	return a, b, nil
}
