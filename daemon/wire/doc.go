// Package wire is heterps's data plane: the binary framing that node daemons
// speak over TCP, the tensor and message codecs carried inside frames, the
// peer handshake that authenticates both ends with a cluster secret, and the
// connections and transport that multiplex many logical streams over one TCP
// connection per pair of peers.
//
// Layers, bottom up:
//
//   - frame.go: the fixed 28-byte frame header and CRC32C-checked payload
//     (data frames leave the CRC out on same-host sockets and under TLS,
//     as both ends agree in the handshake).
//   - tensor.go, message.go: what data frames carry (float32/int64 tensors
//     plus a fixed block of job/stage/replica/step metadata).
//   - handshake.go: HMAC-SHA256 challenge-response in both directions, done
//     before any other frame is parsed; plain mode only on loopback.
//   - conn.go: one authenticated connection with per-stream receive queues,
//     deadlines on every read and write, and close-on-corruption.
//   - listener.go: Dial and an accept loop that authenticates each peer;
//     pending.go bounds the handshakes in progress (in all and per remote
//     host, the oldest displaced) so idle sockets cannot starve real peers.
//   - local.go, shared.go: processes on one host meet over a Unix socket
//     beside each listener, and there hand each other a sealed
//     shared-memory ring that large payloads travel in, the socket
//     carrying only their place.
//   - transport.go: the Transport interface (Send, Recv, AddPeer,
//     RemovePeer) and its TCP implementation; package wiretest puts a faulty
//     network under it for tests.
//
// Every decoder checks limits before it allocates and returns typed errors
// (*DecodeError wrapping one of the Err* reasons); nothing here panics on
// bytes from the network. The package holds no training logic.
//
// Security: the handshake proves both peers hold the cluster secret. Later
// frames are checksummed but neither encrypted nor authenticated, so the
// cluster network must be trusted against active on-path attackers (or run
// over WireGuard or a similar tunnel).
package wire
