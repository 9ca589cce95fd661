package native

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// A big buffer from the CPU backend (an embedding table, its optimiser
// state) is marked for transparent huge pages: its mapping carries the
// "hg" flag in /proc/self/smaps.
func TestBigAllocationsAskForHugePages(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		t.Skipf("transparent huge pages unavailable here (%q, %v)", mode, err)
	}
	b := scalarCPU(t)
	big := b.Alloc(4 * hugePage / 4).(HostBuffer)
	if !vmaFlagged(t, uintptr(unsafe.Pointer(&big[2*hugePage/4])), "hg") {
		t.Fatal("the middle of an 8 MiB buffer is not advised for huge pages")
	}
}

// vmaFlagged reports whether the mapping holding addr lists flag among its
// VmFlags in /proc/self/smaps.
func vmaFlagged(t *testing.T, addr uintptr, flag string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 && strings.Contains(line[:strings.IndexByte(line, ' ')], "-") {
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.Contains(" "+strings.TrimPrefix(line, "VmFlags:")+" ", " "+flag+" ")
		}
	}
	t.Fatalf("no mapping holds %#x: %v", addr, sc.Err())
	return false
}
