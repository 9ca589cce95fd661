package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/config/hosts"
)

func init() {
	registerStoppable("launch", "run a job on a batch allocation (OAR, Slurm, a hostfile): a coordinator and node daemons over oarsh/srun/ssh", runLaunch, syscall.SIGTERM)
}

// Default remote shells, per allocation source. Each gets the host (in
// place of {host}, else after its words) and then one argument, a shell
// command line. srun runs its arguments without a shell, hence "sh -c";
// --overlap lets the steps of one node run side by side (Slurm 20.11 and
// later give a step the node's whole allocation otherwise).
var defaultRsh = map[string]string{
	"oar":      "oarsh",
	"slurm":    "srun --nodes=1 --ntasks=1 --overlap -w {host} sh -c",
	"hostfile": "ssh",
}

type launchFlags struct {
	job, catalog, hostfile, rsh, typ, heterpsd, workdir, logDir string
	oar, slurm, json                                            bool
	basePort                                                    int
	heartbeat, timeout, stopCheckpoint                          time.Duration
	source                                                      string // oar, slurm or hostfile
}

func parseLaunchFlags(args []string, stderr io.Writer) (*launchFlags, error) {
	var f launchFlags
	fs := flag.NewFlagSet("launch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&f.oar, "oar", false, "the hosts of $OAR_NODEFILE (one line per core); started with oarsh")
	fs.BoolVar(&f.slurm, "slurm", false, "the hosts of $SLURM_JOB_NODELIST, cores from $SLURM_JOB_CPUS_PER_NODE, $SLURM_TASKS_PER_NODE or $SLURM_CPUS_ON_NODE; started with srun")
	fs.StringVar(&f.hostfile, "hostfile", "", "the hosts of this file (`host slots=N type=T` per line); started with ssh")
	fs.StringVar(&f.rsh, "rsh", "", "the remote shell, split at spaces; it gets the host (at {host}, else after it) and then a shell command line (default: oarsh, srun ... -w {host} sh -c, or ssh)")
	fs.StringVar(&f.catalog, "catalog", "local", "resource catalog (a file, or a built-in one: local, cloud, grid5000): the coordinator's, and the types of the hosts ([[node]] entries named like a host, else the CPU type matching its cores)")
	fs.StringVar(&f.typ, "type", "", "the catalog type every host offers (default: the hostfile's type=, else from the catalog)")
	fs.IntVar(&f.basePort, "base-port", 7070, "the coordinator listens on this port, node daemon k on base+1+2k (stage links) and base+2+2k (PS); 0 picks free ports")
	fs.StringVar(&f.heterpsd, "heterpsd", "", "heterpsd's path on the hosts (default: heterpsd beside this binary, else on PATH here: the same path on every host)")
	fs.StringVar(&f.workdir, "workdir", "/tmp", "on every host, a fresh heterps-launch-* directory under this one holds the secret, node files and coordinator state; it is removed at the end")
	fs.StringVar(&f.logDir, "log-dir", "", "write the daemons' logs here (default: a temporary directory, removed unless the job fails)")
	fs.DurationVar(&f.heartbeat, "heartbeat", time.Second, "node heartbeat interval")
	fs.DurationVar(&f.timeout, "timeout", 0, "give up (and tear down) after this long; 0 = never")
	addStopCheckpoint(fs, &f.stopCheckpoint)
	fs.BoolVar(&f.json, "json", false, "print one JSON object with the outcome")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	if len(rest) != 1 {
		return nil, errors.New("usage: heterps launch job.toml [--oar | --slurm | --hostfile F] [--rsh CMD] [--catalog C] [--base-port P] [--type T] [--json]")
	}
	f.job = rest[0]
	var sources []string
	for name, on := range map[string]bool{"oar": f.oar, "slurm": f.slurm, "hostfile": f.hostfile != ""} {
		if on {
			sources = append(sources, name)
		}
	}
	if len(sources) != 1 {
		return nil, errors.New("give one of --oar, --slurm and --hostfile F: where the allocated hosts are listed")
	}
	f.source = sources[0]
	if f.rsh == "" {
		f.rsh = defaultRsh[f.source]
	}
	if len(strings.Fields(f.rsh)) == 0 {
		return nil, errors.New("--rsh is empty")
	}
	if f.basePort < 0 || f.basePort > 65535 {
		return nil, fmt.Errorf("--base-port %d: want 0..65535", f.basePort)
	}
	return &f, nil
}

func runLaunch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseLaunchFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	plan, err := prepareLaunch(f)
	if err != nil {
		return failTo(stderr, exitUsage, err)
	}
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	s, err := plan.run(ctx, stderr)
	if err != nil {
		return failTo(stderr, exitFailure, err)
	}
	return reportJob(stdout, stderr, s, f.json)
}

// launchPlan is what a launch starts, where, and how, checked before
// anything starts.
type launchPlan struct {
	f         *launchFlags
	job       jobText
	catalog   []byte
	bin       string // heterpsd on the hosts
	coordHost string
	daemons   []hostOffer
}

// hostOffer is a node daemon to start on a host, and its ports (0: any).
type hostOffer struct {
	host         string
	offer        offer
	port, psPort int
}

func prepareLaunch(f *launchFlags) (*launchPlan, error) {
	job, err := readJob(f.job) // a built-in job by name, relative paths resolved against the file
	if err != nil {
		return nil, err
	}
	if _, err := config.ParseJob(job.label, job.toml); err != nil {
		return nil, err
	}
	catLabel, catSrc, err := config.ReadCatalogSource(f.catalog)
	if err != nil {
		return nil, err
	}
	cat, err := config.ParseCatalog(catLabel, catSrc)
	if err != nil {
		return nil, err
	}
	hs, err := readAllocation(f)
	if err != nil {
		return nil, err
	}
	daemons, err := launchOffers(hs, cat, f.typ)
	if err != nil {
		return nil, err
	}
	if err := assignPorts(daemons, f.basePort); err != nil {
		return nil, err
	}
	bin := f.heterpsd
	if bin == "" {
		if bin, err = findHeterpsd(""); err != nil {
			return nil, err
		}
		if bin, err = filepath.Abs(bin); err != nil {
			return nil, err
		}
	}
	return &launchPlan{f: f, job: job, catalog: catSrc, bin: bin, coordHost: hs[0].Name, daemons: daemons}, nil
}

// readAllocation reads the hosts of the allocation the flags name.
func readAllocation(f *launchFlags) ([]hosts.Host, error) {
	switch f.source {
	case "oar":
		path := os.Getenv("OAR_NODEFILE")
		if path == "" {
			return nil, errors.New("--oar: $OAR_NODEFILE is not set: run inside an OAR job (oarsub -I, or its script)")
		}
		return readHostsFile(path, hosts.ParseOARNodefile)
	case "slurm":
		return hosts.SlurmHosts(os.Getenv)
	default:
		return readHostsFile(f.hostfile, hosts.ParseHostfile)
	}
}

func readHostsFile(path string, parse func(string, io.Reader) ([]hosts.Host, error)) ([]hosts.Host, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return parse(path, file)
}

// launchOffers decides the node daemons: one per host and type, a GPU
// type's one per GPU (perGPU). A host's type is its hostfile type=, else
// --type, else the catalog's: the units of the [[node]] named like the
// host (or its first label), else the one CPU type, or the CPU type whose
// catalog nodes have as many units as the host has cores.
func launchOffers(hs []hosts.Host, cat *config.Catalog, forced string) ([]hostOffer, error) {
	var out []hostOffer
	for _, h := range hs {
		at := h.Name
		if h.Line > 0 {
			at = fmt.Sprintf("%s (line %d)", h.Name, h.Line)
		}
		typ := h.Type
		if typ == "" {
			typ = forced
		}
		var units map[string]int
		fromCores := true // units = cores / threads; a catalog [[node]] gives units
		switch {
		case typ != "":
			if _, ok := cat.Type(typ); !ok {
				return nil, fmt.Errorf("host %s: type %q is not in the catalog", at, typ)
			}
			units = map[string]int{typ: h.Slots}
		case catalogNode(cat, h.Name) != nil:
			units, fromCores = catalogNode(cat, h.Name).Units, false
		default:
			t, err := cpuTypeFor(cat, h.Slots)
			if err != nil {
				return nil, fmt.Errorf("host %s: %w", at, err)
			}
			units = map[string]int{t: h.Slots}
		}
		for _, t := range slices.Sorted(maps.Keys(units)) {
			o := typeOffer(cat, t, units[t])
			if fromCores {
				o.units = max(1, o.units/o.threads)
			}
			out = append(out, hostOffer{host: h.Name, offer: o})
		}
	}
	nameDaemons(out)
	return perGPU(out), nil
}

// perGPU splits each host's GPU daemons into one daemon per GPU (onePerGPU),
// numbering the GPUs of each host from 0.
func perGPU(ds []hostOffer) []hostOffer {
	var out []hostOffer
	next := map[string]int{}
	for _, d := range ds {
		n := next[d.host]
		for _, o := range onePerGPU(d.offer, &n) {
			out = append(out, hostOffer{host: d.host, offer: o, port: d.port, psPort: d.psPort})
		}
		next[d.host] = n
	}
	return out
}

// catalogNode returns the catalog's [[node]] named host, or named its
// first label ("dahu-3" for dahu-3.grenoble.grid5000.fr), if any.
func catalogNode(cat *config.Catalog, host string) *config.CatalogNode {
	short, _, _ := strings.Cut(host, ".")
	for i := range cat.Nodes {
		if cat.Nodes[i].Name == host || cat.Nodes[i].Name == short {
			return &cat.Nodes[i]
		}
	}
	return nil
}

// cpuTypeFor picks the catalog's CPU type for a host with cores cores.
func cpuTypeFor(cat *config.Catalog, cores int) (string, error) {
	var cpus, matching []string
	for _, t := range cat.Types {
		if t.Kind != config.KindCPU {
			continue
		}
		cpus = append(cpus, t.Name)
		for _, n := range cat.Nodes {
			if n.Units[t.Name] == cores {
				matching = append(matching, t.Name)
				break
			}
		}
	}
	switch {
	case len(cpus) == 1:
		return cpus[0], nil
	case len(matching) == 1:
		return matching[0], nil
	case len(cpus) == 0:
		return "", errors.New("the catalog has no CPU type, and the host no type: give --type or a hostfile with type=")
	}
	return "", fmt.Errorf("%d cores do not tell which of the catalog's CPU types %s it offers: give --type or a hostfile with type=",
		cores, strings.Join(cpus, ", "))
}

// nameDaemons names each daemon host.type, by the host's first label
// unless two hosts share it.
func nameDaemons(ds []hostOffer) {
	shortOf := map[string]string{}
	count := map[string]int{}
	for _, d := range ds {
		if _, seen := shortOf[d.host]; !seen {
			short, _, _ := strings.Cut(d.host, ".")
			if isAddress(d.host) {
				short = d.host
			}
			shortOf[d.host] = short
			count[short]++
		}
	}
	for i := range ds {
		name := shortOf[ds[i].host]
		if count[name] > 1 {
			name = ds[i].host
		}
		ds[i].offer.name = name + "." + ds[i].offer.typ
	}
}

// isAddress says whether host is an IPv4 address (whose first label is
// not a name).
func isAddress(host string) bool {
	return strings.Trim(host, "0123456789.") == ""
}

// assignPorts gives daemon k the ports base+1+2k and base+2+2k; base 0
// leaves every port 0 (the daemons pick free ones).
func assignPorts(ds []hostOffer, base int) error {
	if base == 0 {
		return nil
	}
	if last := base + 2*len(ds); last > 65535 {
		return fmt.Errorf("--base-port %d: %d node daemons need ports up to %d (> 65535)", base, len(ds), last)
	}
	for k := range ds {
		ds[k].port, ds[k].psPort = base+1+2*k, base+2+2*k
	}
	return nil
}

// newSecret is a fresh cluster secret: 32 random bytes, hex.
func newSecret() ([]byte, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	return []byte(hex.EncodeToString(raw) + "\n"), nil
}

// launchNodeFile is a launched node daemon's file; a GPU type's daemon
// names its GPU (the host's, which it checks against its inventory before
// registering). Its lease outlasts three of the coordinator's heartbeat
// intervals (launchLease).
func launchNodeFile(d hostOffer, coordinator, secretPath string, heartbeat time.Duration) []byte {
	b := fmt.Appendf(nil, "version = 1\nname = %q\ncoordinator = %q\nlisten = %q\nps_listen = %q\ntype = %q\nunits = %d\nthreads = %d\nsecret_file = %q\nlease = %q\n",
		d.offer.name, coordinator, hostPort(d.host, d.port), hostPort(d.host, d.psPort), d.offer.typ, d.offer.units, d.offer.threads, secretPath,
		launchLease(heartbeat).String())
	return appendGPUs(b, d.offer)
}

// launchLease is a launched node's lease: the daemons' default, or three
// heartbeat intervals when those are longer (the coordinator refuses a
// lease under two).
func launchLease(heartbeat time.Duration) time.Duration {
	return max(config.DefaultLease, 3*heartbeat)
}

func hostPort(host string, port int) string { return fmt.Sprintf("%s:%d", host, port) }
