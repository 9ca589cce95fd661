package ps

// ShardOf returns the shard, of nshards, that holds row id: the splitmix64
// finaliser of the id's bits, modulo nshards. Mixing first keeps ids that
// share a stride (every multiple of nshards, say) from landing on one shard.
// nshards must be at least 1.
func ShardOf(id int64, nshards int) int {
	return int(splitmix64(uint64(id)) % uint64(nshards))
}

// splitmix64 is the finaliser of the splitmix64 generator: every input bit
// moves every output bit.
func splitmix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Partition splits ids by shard: byShard[s] lists, in order, the ids shard s
// holds, and at[s][j] is the position in ids of byShard[s][j], so that rows
// pulled from every shard can be put back in the order of ids.
func Partition(ids []int64, nshards int) (byShard [][]int64, at [][]int) {
	byShard = make([][]int64, nshards)
	at = make([][]int, nshards)
	for i, id := range ids {
		s := ShardOf(id, nshards)
		byShard[s] = append(byShard[s], id)
		at[s] = append(at[s], i)
	}
	return byShard, at
}
