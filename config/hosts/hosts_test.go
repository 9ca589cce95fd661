package hosts

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestParseOARNodefile(t *testing.T) {
	f, err := os.Open("testdata/oar-nodefile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseOARNodefile("testdata/oar-nodefile", f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{{"dahu-3.grenoble.grid5000.fr", 5, "", 1}, {"dahu-7.grenoble.grid5000.fr", 2, "", 5}, {"chifflot-1.lille.grid5000.fr", 1, "", 9}}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestParseHostfile(t *testing.T) {
	f, err := os.Open("testdata/hostfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseHostfile("testdata/hostfile", f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{{"node-1", 32, "cpu", 2}, {"node-2", 16, "", 4}, {"gpu-1", 4, "v100", 5}, {"gpu-1", 8, "cpu", 6}}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// TestMalformedFiles: each error names the file and the line.
func TestMalformedFiles(t *testing.T) {
	bad, err := os.ReadFile("testdata/oar-nodefile-bad")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src, want string
		parse           func(string, *strings.Reader) ([]Host, error)
	}{
		{"nodefile", string(bad), `nodefile:3: "dahu 7" is not a host name`, oar},
		{"nodefile", "\n\n", "nodefile: no hosts", oar},
		{"nodefile", "a\n" + strings.Repeat("x", 70000) + "\n", "nodefile:2: bufio.Scanner: token too long", oar},
		{"hostfile", "a slots=2\nb slots=0\n", "hostfile:2: slots=0: want a whole number in 1..65536", hostfile},
		{"hostfile", "a slots=2\n\nb cpus=4\n", `hostfile:3: unknown key "cpus" (want slots=N or type=T)`, hostfile},
		{"hostfile", "a slots\n", `hostfile:1: "slots": want key=value (slots=N, type=T)`, hostfile},
		{"hostfile", "a type=cpu\n# c\na type=cpu slots=3\n", `hostfile:3: host a with type "cpu" again (first on line 1)`, hostfile},
		{"hostfile", "a type=c:pu\n", "hostfile:1: type=c:pu is not a type name", hostfile},
		{"hostfile", "a slots=1 slots=2\n", "hostfile:1: slots given twice", hostfile},
		{"hostfile", "-a\n", `hostfile:1: "-a" is not a host name`, hostfile},
		{"hostfile", "# nothing\n", "hostfile: no hosts", hostfile},
	} {
		_, err := tc.parse(tc.name, strings.NewReader(tc.src))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %s", tc.src, err, tc.want)
		}
	}
}

func oar(name string, r *strings.Reader) ([]Host, error)      { return ParseOARNodefile(name, r) }
func hostfile(name string, r *strings.Reader) ([]Host, error) { return ParseHostfile(name, r) }

// TestExpandHostlist: golden expansions of Slurm host lists.
func TestExpandHostlist(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"gpu-[01-04,07],cpu-1", "gpu-01 gpu-02 gpu-03 gpu-04 gpu-07 cpu-1"},
		{"n[8-11]", "n8 n9 n10 n11"},
		{"n[008-011]", "n008 n009 n010 n011"},
		{"rack[1-2]-n[01-02]", "rack1-n01 rack1-n02 rack2-n01 rack2-n02"},
		{"a[1,3]b[5]c,d", "a1b5c a3b5c d"},
		{"dahu-1.grenoble.grid5000.fr", "dahu-1.grenoble.grid5000.fr"},
		{"127.0.0.[1-3]", "127.0.0.1 127.0.0.2 127.0.0.3"},
		{"[1-2]x", "1x 2x"},
	} {
		got, err := ExpandHostlist("SLURM_JOB_NODELIST", tc.in)
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("%s: got %q, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

// TestMalformedHostlists: each error gives the 1-based position.
func TestMalformedHostlists(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"gpu-[01-04", `SLURM_JOB_NODELIST "gpu-[01-04": at position 5: '[' is never closed`},
		{"gpu-[01-04,", `SLURM_JOB_NODELIST "gpu-[01-04,": at position 5: '[' is never closed`},
		{"gpu-01]", `SLURM_JOB_NODELIST "gpu-01]": at position 7: ']' without '['`},
		{"gpu-[04-01]", `SLURM_JOB_NODELIST "gpu-[04-01]": at position 6: range 04-01 runs backwards`},
		{"gpu-[1-[2]]", `SLURM_JOB_NODELIST "gpu-[1-[2]]": at position 8: want a number, got '['`},
		{"gpu-[1[2]]", `SLURM_JOB_NODELIST "gpu-[1[2]]": at position 7: '[' inside brackets (they do not nest)`},
		{"gpu-[a-b]", `SLURM_JOB_NODELIST "gpu-[a-b]": at position 6: want a number, got 'a'`},
		{"gpu-[1;2]", `SLURM_JOB_NODELIST "gpu-[1;2]": at position 7: unexpected ';' in a range (want digits, '-', ',' or ']')`},
		{"a,,b", `SLURM_JOB_NODELIST "a,,b": at position 3: empty host name`},
		{"a,", `SLURM_JOB_NODELIST "a,": at position 3: empty host name`},
		{"", `SLURM_JOB_NODELIST "": at position 1: empty host name`},
		{"a b", `SLURM_JOB_NODELIST "a b": at position 2: unexpected ' ' in a host name`},
		{"n[1-2],n1", `SLURM_JOB_NODELIST "n[1-2],n1": at position 8: host n1 is listed twice`},
		{"-n[1-2]", `SLURM_JOB_NODELIST "-n[1-2]": at position 1: "-n1" is not a host name`},
		{"n[0-99999]", `SLURM_JOB_NODELIST "n[0-99999]": at position 3: more than 65536 hosts`},
		{"a[0-999]b[0-999]", `SLURM_JOB_NODELIST "a[0-999]b[0-999]": at position 10: more than 65536 hosts`},
		{"n[1234567890]", `SLURM_JOB_NODELIST "n[1234567890]": at position 3: number 1234567890 is too long`},
	} {
		_, err := ExpandHostlist("SLURM_JOB_NODELIST", tc.in)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v\nwant %s", tc.in, err, tc.want)
		}
	}
}

func TestExpandCounts(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"2(x3),1", "[2 2 2 1]"},
		{"36", "[36]"},
		{"72(x2),36,4(x1)", "[72 72 36 4]"},
		{"2(x3", `SLURM_TASKS_PER_NODE "2(x3": at position 2: '(' is never closed`},
		{"2(3)", `SLURM_TASKS_PER_NODE "2(3)": at position 2: want (xN) after a count`},
		{"2,,1", `SLURM_TASKS_PER_NODE "2,,1": at position 3: want a number, got ','`},
		{"0", `SLURM_TASKS_PER_NODE "0": at position 1: count 0 is not in 1..65536`},
		{"2(x0)", `SLURM_TASKS_PER_NODE "2(x0)": at position 2: repeat count 0`},
		{"2x", `SLURM_TASKS_PER_NODE "2x": at position 2: unexpected 'x' (want ',' or the end)`},
		{"1(x99999)", `SLURM_TASKS_PER_NODE "1(x99999)": at position 1: more than 65536 hosts`},
	} {
		got, err := ExpandCounts("SLURM_TASKS_PER_NODE", tc.in)
		s := fmt.Sprint(got)
		if err != nil {
			s = err.Error()
		}
		if s != tc.want {
			t.Errorf("%s: got %s, want %s", tc.in, s, tc.want)
		}
	}
}

func TestSlurmHosts(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, tc := range []struct {
		env  func(string) string
		want string
	}{
		{env("SLURM_JOB_NODELIST", "gpu-[01-02],cpu-1", "SLURM_TASKS_PER_NODE", "2(x2),1", "SLURM_CPUS_ON_NODE", "8"),
			"[{gpu-01 2  0} {gpu-02 2  0} {cpu-1 1  0}]"},
		{env("SLURM_JOB_NODELIST", "gpu-[01-02]", "SLURM_JOB_CPUS_PER_NODE", "32(x2)", "SLURM_TASKS_PER_NODE", "1(x2)"),
			"[{gpu-01 32  0} {gpu-02 32  0}]"},
		{env("SLURM_NODELIST", "n[1-2]", "SLURM_CPUS_ON_NODE", "8"), "[{n1 8  0} {n2 8  0}]"},
		{env("SLURM_JOB_NODELIST", "n[1-2]"), "[{n1 1  0} {n2 1  0}]"},
		{env("SLURM_JOB_NODELIST", "n[1-3]", "SLURM_TASKS_PER_NODE", "2(x2)"),
			`SLURM_TASKS_PER_NODE "2(x2)": 2 counts for the 3 hosts of SLURM_JOB_NODELIST`},
		{env("SLURM_JOB_NODELIST", "n1", "SLURM_CPUS_ON_NODE", "many"), `SLURM_CPUS_ON_NODE "many": want a whole number in 1..65536`},
		{env(), "SLURM_JOB_NODELIST is not set: run inside a Slurm allocation (salloc, sbatch)"},
	} {
		got, err := SlurmHosts(tc.env)
		s := fmt.Sprint(got)
		if err != nil {
			s = err.Error()
		}
		if s != tc.want {
			t.Errorf("got %s\nwant %s", s, tc.want)
		}
	}
}
