package scrub

import (
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// vLLM's FS tier names a block file
// <root>/<model>_<sha256(cfg)[:12]>_r<rank>/<h[:3]>/<h[3:5]>_g<group>/<h>.bin
// (FileMapper.get_file_name, vllm/v1/kv_offload/file_mapper.py,
// CHIPMUNK-T0T/vllm @addfd008): h is the block hash in hex, the model's
// "/" written "_".
var (
	vllmBase = regexp.MustCompile(`^(.+)_([0-9a-f]{12})_r([0-9]+)$`)
	vllmSub  = regexp.MustCompile(`^([0-9a-f]{2})_g([0-9]+)$`)
	hexName  = regexp.MustCompile(`^[0-9a-f]+$`)
	// vllmTemp is a store in progress: the tier writes <h>.bin_<n>.tmp and
	// renames it.
	vllmTemp = regexp.MustCompile(`\.bin_[0-9]+\.tmp$`)
)

// parseVLLMPath reads what a vllm-fs block file's path says: its group and
// block hash from the last three elements, and the model, namespace hash
// and rank from the fourth when it is there. ok is false for a path not
// named so.
func parseVLLMPath(path string) (Name, bool) {
	file := filepath.Base(path)
	sub := filepath.Base(filepath.Dir(path))
	top := filepath.Base(filepath.Dir(filepath.Dir(path)))
	h, found := strings.CutSuffix(file, ".bin")
	if !found || len(h) < 5 || !hexName.MatchString(h) {
		return Name{}, false
	}
	m := vllmSub.FindStringSubmatch(sub)
	if m == nil || m[1] != h[3:5] || top != h[:3] {
		return Name{}, false
	}
	g, err := strconv.Atoi(m[2])
	if err != nil {
		return Name{}, false
	}
	n := Name{Group: &g, BlockHash: h}
	base := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(path))))
	if b := vllmBase.FindStringSubmatch(base); b != nil {
		if r, err := strconv.Atoi(b[3]); err == nil {
			n.Model, n.ConfigHash, n.Rank = b[1], b[2], &r
		}
	}
	return n, true
}

// LMCache's FS L2 adapter names a file
// <model, "/" as "-SEP->@0x<kv_rank:08x>@<group:x>@<chunk hash hex>[@salt].data
// (_object_key_to_filename, lmcache/v1/distributed/l2_adapters/
// fs_l2_adapter.py, LMCache/LMCache @07a84874), and writes it as
// <stem>.tmp first.
const (
	lmcacheSep   = "@"
	lmcacheSlash = "-SEP-"
	lmcacheExt   = ".data"
)

// lmcacheName is a parsed LMCache file name.
type lmcacheName struct {
	Name
	chunk []byte
}

// parseLMCacheName reverses the adapter's file name: four fields, or five
// with a salt. ok is false for a name not written so.
func parseLMCacheName(file string) (lmcacheName, bool) {
	stem, found := strings.CutSuffix(file, lmcacheExt)
	if !found {
		return lmcacheName{}, false
	}
	parts := strings.Split(stem, lmcacheSep)
	if len(parts) != 4 && len(parts) != 5 {
		return lmcacheName{}, false
	}
	if parts[0] == "" || !strings.HasPrefix(parts[1], "0x") {
		return lmcacheName{}, false
	}
	rank, err := strconv.ParseUint(parts[1][2:], 16, 64)
	if err != nil {
		return lmcacheName{}, false
	}
	group, err := strconv.ParseUint(parts[2], 16, 31)
	if err != nil {
		return lmcacheName{}, false
	}
	chunk, err := hex.DecodeString(parts[3])
	if err != nil || len(chunk) == 0 {
		return lmcacheName{}, false
	}
	g := int(group)
	ws, r, lws, lr := int(rank>>24&0xff), int(rank>>16&0xff), int(rank>>8&0xff), int(rank&0xff)
	n := lmcacheName{
		Name: Name{
			Model:  strings.ReplaceAll(parts[0], lmcacheSlash, "/"),
			KVRank: fmt.Sprintf("0x%08x", rank), Rank: &r, WorldSize: &ws, LocalWorldSize: &lws, LocalRank: &lr,
			Group: &g, ChunkHash: strings.ToLower(parts[3]),
		},
		chunk: chunk,
	}
	if len(parts) == 5 {
		n.Salt = parts[4]
	}
	return n, true
}
