//go:build !linux

package native

// adviseHugePages does nothing where transparent huge pages are Linux's.
func adviseHugePages([]float32) {}
