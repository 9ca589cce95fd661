package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Node is a node daemon's file (`heterpsd --role=node --config node.toml`):
// who it is, where its coordinator is, where it listens, and what it offers.
//
//	version = 1
//	name = "gpu-3"
//	coordinator = "http://10.0.0.1:7070"   # or "10.0.0.1:7070" (http:// is implied)
//	listen = "10.0.0.3:7071"     # stage links (the wire transport)
//	ps_listen = "10.0.0.3:7171"  # parameter-server shards
//	type = "cpu-1t"              # a catalog type
//	units = 1
//	threads = 1                  # CPU threads per unit
//	gpus = [0, 1]                # a GPU type's devices (driver ordinals), one per unit
//	secret_file = "/etc/heterps/secret"   # or: plain = true (loopback only)
//	tcp_only = false             # optional: true keeps same-host peers on TCP (no Unix socket)
//	socket_only = false          # optional: true keeps same-host payloads in the Unix socket (no shared-memory rings)
//	tls_cert = "/etc/heterps/tls/gpu-3.pem"  # optional mutual TLS (heterps certs): with all three,
//	tls_key = "/etc/heterps/tls/gpu-3-key.pem"  # the data plane and the API run in TLS 1.3,
//	tls_ca = "/etc/heterps/tls/ca.pem"       # coordinator = "https://...", secret_file optional
//	lease = "10s"                # keep tasks running this long without the coordinator
//	ps_memory = "4GiB"           # optional: memory budget of each PS shard hosted here
//	cpu_share = 0.25             # optional: emulate a slower node (0.01..1; default 1)
//	compute_nice = 10            # optional: nice levels the stages' kernel threads run below the daemon (0..19; default 10)
//	register_timeout = "5m"      # optional: give up when no coordinator answers this long (default: wait forever)
//
// The node registers listen and ps_listen as the addresses other nodes
// reach it at, so they name this machine's interface, not a wildcard; port
// 0 picks a free port, which the node registers.
type Node struct {
	Version     int    `toml:"version"`
	Name        string `toml:"name"`
	Coordinator string `toml:"coordinator"`
	Listen      string `toml:"listen"`
	PSListen    string `toml:"ps_listen"`
	Type        string `toml:"type"`
	Units       int    `toml:"units"`
	Threads     int    `toml:"threads"`
	// GPUs are the driver ordinals of the GPUs a node of a GPU type offers,
	// one per unit (so len(GPUs) == Units); a CPU type names none. The
	// coordinator checks them against the catalog type's kind and device
	// model when the node registers.
	GPUs       []int  `toml:"gpus"`
	SecretFile string `toml:"secret_file"`
	Plain      bool   `toml:"plain"`
	// TCPOnly keeps this node's data plane on TCP even towards processes
	// on the same host, which otherwise meet over a Unix socket beside
	// each listener (wire.Config.TCPOnly).
	TCPOnly bool `toml:"tcp_only"`
	// SocketOnly keeps payloads between processes on one host in their
	// Unix socket instead of shared-memory rings (wire.Config.NoSharedMemory).
	SocketOnly bool `toml:"socket_only"`
	// TLSCert, TLSKey and TLSCA turn on mutual TLS (all three or none):
	// this machine's certificate and key and the cluster CA, as `heterps
	// certs` writes them.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	TLSCA   string `toml:"tls_ca"`
	// Lease is how long the node keeps its tasks running while the
	// coordinator cannot be reached; past it, it stops them. Zero means
	// the daemon's default.
	Lease Duration `toml:"lease"`
	// PSMemory is the memory budget of each parameter-server shard the node
	// hosts (ps.Config.MemoryBytes): bytes, or a string such as "4GiB";
	// 0 or absent = unlimited.
	PSMemory ByteSize `toml:"ps_memory"`
	// CPUShare caps the fraction of its CPU the node gives its work, to
	// emulate a slower node on one machine (daemon/node's throttle): in
	// api.MinCPUShare..1, 1 when absent (LoadNode and ParseNode set it).
	CPUShare *float64 `toml:"cpu_share"`
	// ComputeNice is how many nice levels below the daemon's own priority
	// the threads that run a stage's kernels run, so that the threads
	// serving the network and the parameter servers preempt them as soon
	// as a message arrives (daemon/node's compute thread): 0..19,
	// DefaultComputeNice when absent (LoadNode and ParseNode set it); 0
	// runs them at the daemon's priority.
	ComputeNice *int `toml:"compute_nice"`
	// RegisterTimeout is how long the daemon tries to register before it
	// gives up with an error; 0 or absent = it keeps trying (and says so).
	RegisterTimeout Duration `toml:"register_timeout"`
	// CPUs, a Linux CPU list such as "0-3,8" (ParseCPUList), pins every
	// thread of the daemon to those CPUs (Linux only); empty = wherever
	// the kernel puts them. Node daemons that share a machine train
	// steadier on cores of their own.
	CPUs string `toml:"cpus"`
}

// CPUList is the node's CPUs (nil: not pinned); validate checked them.
func (n *Node) CPUList() []int {
	if n.CPUs == "" {
		return nil
	}
	cpus, _ := ParseCPUList(n.CPUs)
	return cpus
}

// CoordinatorURL returns a coordinator's address as a base URL: an
// http(s) URL as it is, without a trailing slash; host:port (no scheme)
// as http://host:port.
func CoordinatorURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		if !isHostPort(s) {
			return "", fmt.Errorf("coordinator %q: want host:port or an http(s) URL", s)
		}
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("coordinator %q: want host:port or an http(s) URL", s)
	}
	return strings.TrimSuffix(s, "/"), nil
}

// Duration is a TOML string such as "30s" or "1m30s" (time.ParseDuration).
type Duration struct{ time.Duration }

// UnmarshalText parses a duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("want a duration such as \"30s\": %w", err)
	}
	d.Duration = v
	return nil
}

// MarshalText formats a duration.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Bounds of a node's lease, and the lease of a node file without one.
const (
	minLease     = time.Second
	maxLease     = 24 * time.Hour
	DefaultLease = 10 * time.Second
)

// minCPUShare is api.MinCPUShare (config does not import the control
// plane's package).
const minCPUShare = 0.01

// DefaultComputeNice is a node file's compute_nice when absent: measured on
// a 2-core Zen 4 VM, nice 5, 10 and 19 cut a 2-node job's wait for its
// parameters alike (2.3-4.0 ms a step to 1.2-2.4), and 10 leaves other
// work on the machine more room than 19.
const DefaultComputeNice = 10

// MaxComputeNice is the largest compute_nice (nice runs from -20 to 19).
const MaxComputeNice = 19

// maxNodeUnits bounds units and threads (the control plane's own bound).
const maxNodeUnits = 1 << 16

// maxNodeGPUs bounds the gpus a node file names (api.MaxGPUs).
const maxNodeGPUs = 256

// LoadNode reads, decodes and validates a node file.
func LoadNode(path string) (*Node, error) {
	var n Node
	src, err := DecodeFile(path, &n)
	if err != nil {
		return nil, err
	}
	return n.finish(NewLocator(path, src))
}

// ParseNode decodes and validates a node file's contents, named name in
// errors.
func ParseNode(name string, src []byte) (*Node, error) {
	var n Node
	if err := Decode(name, src, &n); err != nil {
		return nil, err
	}
	return n.finish(NewLocator(name, src))
}

func (n *Node) finish(loc *Locator) (*Node, error) {
	if n.Version == 0 {
		n.Version = 1
	}
	if n.Threads == 0 {
		n.Threads = 1
	}
	if n.CPUShare == nil {
		one := 1.0
		n.CPUShare = &one
	}
	if n.ComputeNice == nil {
		nice := DefaultComputeNice
		n.ComputeNice = &nice
	}
	if err := n.validate(loc); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Node) validate(loc *Locator) error {
	var errs errorList
	if n.Version != 1 {
		errs.add(loc.Errorf("version", "unsupported version %d (this heterps reads version 1)", n.Version))
	}
	if !identifier.MatchString(n.Name) {
		errs.add(loc.Errorf("name", "%q is not a node name (letters, digits, '.', '_' and '-')", n.Name))
	}
	if n.TLS() && !strings.Contains(n.Coordinator, "://") && isHostPort(n.Coordinator) {
		n.Coordinator = "https://" + n.Coordinator // host:port means https with TLS
	}
	if u, err := CoordinatorURL(n.Coordinator); err != nil {
		errs.add(loc.Errorf("coordinator", "%q is not host:port or an http(s) URL", n.Coordinator))
	} else {
		n.Coordinator = u
	}
	if n.RegisterTimeout.Duration < 0 {
		errs.add(loc.Errorf("register_timeout", "must be >= 0 (0: keep trying), got %s", n.RegisterTimeout))
	}
	for _, f := range []struct{ field, addr string }{{"listen", n.Listen}, {"ps_listen", n.PSListen}} {
		if why := hostPortFault(f.addr); why != "" {
			errs.add(loc.Errorf(f.field, "%q is not host:port: %s (port 0 picks a free one)", f.addr, why))
		} else if isUnspecified(f.addr) {
			errs.add(loc.Errorf(f.field, "%q: give the address other nodes reach this one at, not a wildcard", f.addr))
		} else if n.Plain && !isLoopback(f.addr) {
			errs.add(loc.Errorf(f.field, "%q is not a loopback address: plain mode is for loopback only; set secret_file", f.addr))
		}
	}
	if !identifier.MatchString(n.Type) {
		errs.add(loc.Errorf("type", "%q is not a type name", n.Type))
	}
	if n.Units < 1 || n.Units > maxNodeUnits {
		errs.add(loc.Errorf("units", "must be in 1..%d, got %d", maxNodeUnits, n.Units))
	}
	if n.Threads < 1 || n.Threads > maxNodeUnits {
		errs.add(loc.Errorf("threads", "must be in 1..%d, got %d", maxNodeUnits, n.Threads))
	}
	n.checkGPUs(loc, &errs)
	if l := n.Lease.Duration; l != 0 && (l < minLease || l > maxLease) {
		errs.add(loc.Errorf("lease", "must be between %s and %s, got %s", minLease, maxLease, l))
	}
	if n.PSMemory < 0 {
		errs.add(loc.Errorf("ps_memory", "must be >= 0 bytes, got %d", n.PSMemory))
	}
	if s := *n.CPUShare; !(s >= minCPUShare && s <= 1) {
		errs.add(loc.Errorf("cpu_share", "must be in %g..1 (a fraction of the node's CPU), got %g", minCPUShare, s))
	}
	if c := *n.ComputeNice; c < 0 || c > MaxComputeNice {
		errs.add(loc.Errorf("compute_nice", "must be in 0..%d (nice levels below the daemon's priority), got %d", MaxComputeNice, c))
	}
	if n.CPUs != "" {
		if _, err := ParseCPUList(n.CPUs); err != nil {
			errs.add(loc.Errorf("cpus", "%v (want a CPU list such as \"0-3,8\")", err))
		}
	}
	n.checkAuth(loc, &errs)
	return errs.err()
}

// checkGPUs: driver ordinals, each once, one per unit; none on a type
// whose name says it is a CPU type (config.TypeKind: the node file has no
// catalog, so the coordinator checks the catalog's kind at registration).
func (n *Node) checkGPUs(loc *Locator, errs *errorList) {
	if len(n.GPUs) == 0 {
		return
	}
	if TypeKind(n.Type, "") == KindCPU {
		errs.add(loc.Errorf("gpus", "type %q is a CPU type: it offers no GPUs (remove gpus, or name a GPU type)", n.Type))
		return
	}
	if len(n.GPUs) > maxNodeGPUs {
		errs.add(loc.Errorf("gpus", "at most %d GPUs, got %d", maxNodeGPUs, len(n.GPUs)))
		return
	}
	seen := map[int]bool{}
	for i, g := range n.GPUs {
		switch {
		case g < 0:
			errs.add(loc.Errorf("gpus", "gpus[%d] = %d: a device ordinal is >= 0", i, g))
		case seen[g]:
			errs.add(loc.Errorf("gpus", "gpus[%d]: device %d is named twice (one unit = one GPU)", i, g))
		}
		seen[g] = true
	}
	if len(n.GPUs) != n.Units {
		errs.add(loc.Errorf("gpus", "%d GPUs for units = %d: a GPU type's unit is one GPU, name one per unit", len(n.GPUs), n.Units))
	}
}

// TLS reports whether the node runs mutual TLS.
func (n *Node) TLS() bool { return n.TLSCert != "" }

// checkAuth: plain, or authenticated by the secret, mutual TLS or both;
// TLS takes its three files and an https coordinator.
func (n *Node) checkAuth(loc *Locator, errs *errorList) {
	set := 0
	for _, f := range []string{n.TLSCert, n.TLSKey, n.TLSCA} {
		if f != "" {
			set++
		}
	}
	switch {
	case set != 0 && set != 3:
		errs.add(loc.Errorf("tls_cert", "set all of tls_cert, tls_key and tls_ca, or none"))
	case n.Plain && (set != 0 || n.SecretFile != ""):
		errs.add(loc.Errorf("plain", "plain = true excludes secret_file and tls_*"))
	case !n.Plain && set == 0 && n.SecretFile == "":
		errs.add(loc.Errorf("secret_file", "set secret_file, the tls_* files, or plain = true (loopback only)"))
	case set == 3 && strings.HasPrefix(n.Coordinator, "http://"):
		errs.add(loc.Errorf("coordinator", "%q: with tls_* the coordinator is reached over https://", n.Coordinator))
	case set == 0 && strings.HasPrefix(n.Coordinator, "https://"):
		errs.add(loc.Errorf("coordinator", "%q: https needs tls_cert, tls_key and tls_ca (the coordinator asks for this node's certificate)", n.Coordinator))
	}
}

func isHostPort(addr string) bool { return hostPortFault(addr) == "" }

// hostPortFault says what keeps addr from being host:port, or "".
func hostPortFault(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	switch {
	case addr == "":
		return "missing"
	case err != nil:
		return "no port"
	case host == "":
		return "no host"
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Sprintf("port %q is not a number in 0..65535", port)
	}
	return ""
}

func isUnspecified(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

func isLoopback(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}
