package data

// DefaultVocab is the hashed vocabulary of the ctrdnn model's embedding table.
const DefaultVocab = 1_000_001

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// HashID maps a categorical value of a slot to an id in [0, vocab): FNV-1a
// 64 over the slot number as 4 little-endian bytes followed by the value's
// bytes as written in the file, modulo vocab. The same value in different
// slots gets unrelated ids. vocab must be positive.
func HashID(slot int, value []byte, vocab int64) int64 {
	h := uint64(fnvOffset64)
	for k := range 4 {
		h ^= uint64(byte(slot >> (8 * k)))
		h *= fnvPrime64
	}
	for _, c := range value {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return int64(h % uint64(vocab))
}

// mix64 is splitmix64's finaliser: a bijection on uint64 whose output bits
// all depend on every input bit.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
