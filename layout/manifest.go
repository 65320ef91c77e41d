package layout

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/kvaudit/kvaudit/parse"
)

// ManifestFormat is the format tag of a dump manifest.
const ManifestFormat = "kvaudit-dump/1"

// ManifestKey is the safetensors __metadata__ key that holds an embedded
// manifest.
const ManifestKey = "kvaudit.manifest"

// MarshalManifest returns the manifest as indented JSON.
func MarshalManifest(m *Manifest) ([]byte, error) {
	return json.MarshalIndent(m, "", " ")
}

// Group kinds (docs/spec.md §10).
const (
	KindFullAttention = "full_attention"
	KindSlidingWindow = "sliding_window"
	KindMLA           = "mla"
	KindMamba         = "mamba"
)

// Manifest is the JSON description of one rank's KV cache (docs/spec.md §10).
type Manifest struct {
	Format    string    `json:"format"`
	Model     Model     `json:"model"`
	Parallel  Parallel  `json:"parallel"`
	NumBlocks int       `json:"num_blocks"`
	Groups    []Group   `json:"groups"`
	Requests  []Request `json:"requests"`
	// Engine is the engine whose cache was dumped: "" for vLLM's (the
	// default), "sglang" for SGLang's pools, described in SGLang.
	Engine string      `json:"engine,omitempty"`
	SGLang *SGLangPool `json:"sglang,omitempty"`
}

// Model names the model and its KV head count (used to infer replication).
type Model struct {
	Name       string `json:"name,omitempty"`
	NumKVHeads int    `json:"num_kv_heads,omitempty"`
}

// Parallel is the rank's place in the TP x PP grid, and the name of its
// NIXL agent when the exporter was given one (nil otherwise; never empty).
type Parallel struct {
	TPRank int     `json:"tp_rank"`
	TPSize int     `json:"tp_size"`
	PPRank int     `json:"pp_rank"`
	PPSize int     `json:"pp_size"`
	Agent  *string `json:"agent,omitempty"`
}

// Group is a KV cache group: layers sharing one block table.
type Group struct {
	ID            int     `json:"id"`
	Kind          string  `json:"kind"`
	BlockSize     int     `json:"block_size"`
	SlidingWindow int     `json:"sliding_window,omitempty"`
	HostResident  bool    `json:"host_resident,omitempty"`
	Layers        []Layer `json:"layers"`
}

// Layer is one attention or state layer's cache on this rank.
type Layer struct {
	Name           string   `json:"name"`
	Dtype          string   `json:"dtype"`
	NumKVHeads     int      `json:"num_kv_heads,omitempty"`
	HeadSize       int      `json:"head_size,omitempty"`
	Tensor         string   `json:"tensor,omitempty"`
	Layout         []string `json:"layout,omitempty"`
	Spec           string   `json:"spec,omitempty"`
	File           string   `json:"file,omitempty"`
	Source         *Source  `json:"source,omitempty"`
	MaxTPShards    *int     `json:"max_tp_shards,omitempty"`
	Replicas       *int     `json:"replicas,omitempty"`
	AliasOf        string   `json:"alias_of,omitempty"`
	TokensPerState *int     `json:"tokens_per_state,omitempty"`
	NumHeadSlots   *int     `json:"num_head_slots,omitempty"`
	States         []State  `json:"states,omitempty"`
	// Address is the device address of the layer's first element as the
	// engine registered it ("0x" and 1 to 16 hex digits; "" when not
	// given): the address NIXL descriptors of this layer are relative to.
	Address string `json:"address,omitempty"`
}

// DeviceAddress returns the layer's address and whether it has one (the
// manifest is validated, so a present address parses).
func (l *Layer) DeviceAddress() (uint64, bool) { return deviceAddress(l.Address) }

// Source places a tensor in a raw file, or in live device memory.
type Source struct {
	File    string  `json:"file,omitempty"`
	CUDAIPC string  `json:"cuda_ipc,omitempty"`
	Offset  int64   `json:"offset"`
	Dtype   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Strides []int64 `json:"strides,omitempty"`
}

// State is one state tensor packed in a state layer's page (docs/spec.md §6).
// Address, when given, is the device address of its first element as the
// engine registered it.
type State struct {
	Dtype   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Split   *Split  `json:"split,omitempty"`
	Address string  `json:"address,omitempty"`
}

// DeviceAddress returns the state's address and whether it has one.
func (s *State) DeviceAddress() (uint64, bool) { return deviceAddress(s.Address) }

func deviceAddress(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	v, err := ParseHex64(s)
	return v, err == nil
}

// Split is the axis TP shards in a state and its segments, each
// [local_size, replicas].
type Split struct {
	Axis     int      `json:"axis"`
	Segments [][2]int `json:"segments"`
}

// Request is one request's block tables and the tokens they hold.
type Request struct {
	ID         string `json:"id"`
	ProducerID string `json:"producer_id,omitempty"`
	// EngineRequestID is the engine's own id of the request where it
	// differs from ID: vLLM appends a random suffix to the id a user gave
	// (PR #27987); the capture connector names a dump by the user's id and
	// keeps vLLM's here. Read, never used for pairing.
	EngineRequestID        string              `json:"engine_request_id,omitempty"`
	NumTokens              int                 `json:"num_tokens"`
	NumLocalComputedTokens int                 `json:"num_local_computed_tokens,omitempty"`
	BlockTable             map[string]BlockIDs `json:"block_table,omitempty"`
	StateBlock             map[string]int      `json:"state_block,omitempty"`
	BlockHashes            map[string][]string `json:"block_hashes,omitempty"`
	StoredChecksums        map[string][]string `json:"stored_checksums,omitempty"`
	// SGLang is the request's pages, token range and sent value in an
	// SGLang dump (nil otherwise).
	SGLang *SGLangRequest `json:"sglang,omitempty"`
}

// PairID returns the id of the producer request a consumer request loads
// (docs/spec.md §9, "Pairing"): its producer_id, else its own id. It is
// the one statement of the pairing rule; every pairing uses it.
func (r Request) PairID() string {
	if r.ProducerID != "" {
		return r.ProducerID
	}
	return r.ID
}

// ParseManifest decodes and validates a manifest. file names it in errors.
// It checks everything that does not need the tensors: the format, ranks,
// groups, layers, axes and requests. On error it returns nil and a
// *parse.Error (parse.Manifest).
func ParseManifest(file string, data []byte) (*Manifest, error) {
	var m Manifest
	if err := DecodeStrictJSON(data, &m); err != nil {
		return nil, &parse.Error{Format: parse.Manifest, File: file, Msg: err.Error()}
	}
	if err := m.Validate(); err != nil {
		if me := parse.As(err, parse.Manifest); me != nil {
			me.File = file
			return nil, me
		}
		return nil, &parse.Error{Format: parse.Manifest, File: file, Msg: err.Error()}
	}
	return &m, nil
}

// knownAxes are the axis names a layout may use.
var knownAxes = []string{"block", "token", "head", "kv", "dim", "cell", "page"}

// Validate checks the manifest's own consistency (not its tensors). The
// error is a *parse.Error (parse.Manifest) without File.
func (m *Manifest) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &parse.Error{Format: parse.Manifest, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if m.Format != ManifestFormat {
		return bad("format", "got %q, want %q", m.Format, ManifestFormat)
	}
	p := m.Parallel
	if p.TPSize < 1 || p.TPSize > 1<<16 {
		return bad("parallel.tp_size", "%d is not in 1..65536", p.TPSize)
	}
	if p.TPRank < 0 || p.TPRank >= p.TPSize {
		return bad("parallel.tp_rank", "%d is not in 0..%d", p.TPRank, p.TPSize-1)
	}
	if p.PPSize < 1 || p.PPSize > 1<<16 {
		return bad("parallel.pp_size", "%d is not in 1..65536", p.PPSize)
	}
	if p.PPRank < 0 || p.PPRank >= p.PPSize {
		return bad("parallel.pp_rank", "%d is not in 0..%d", p.PPRank, p.PPSize-1)
	}
	if p.Agent != nil && *p.Agent == "" {
		return bad("parallel.agent", "empty: a NIXL agent name is a non-empty string (leave it out when there is none)")
	}
	if m.Model.NumKVHeads < 0 {
		return bad("model.num_kv_heads", "%d is negative", m.Model.NumKVHeads)
	}
	if m.NumBlocks < 1 || m.NumBlocks > 1<<40 {
		return bad("num_blocks", "%d is not in 1..2^40", m.NumBlocks)
	}
	groupIDs, err := m.validateGroups(bad)
	if err != nil {
		return err
	}
	ids := map[string]bool{}
	for ri := range m.Requests {
		r := &m.Requests[ri]
		rf := fmt.Sprintf("requests[%d]", ri)
		if r.ID == "" {
			return bad(rf+".id", "empty request id")
		}
		if ids[r.ID] {
			return bad(rf+".id", "request %q appears twice", r.ID)
		}
		ids[r.ID] = true
		if err := m.validateRequest(r, rf, groupIDs, bad); err != nil {
			return err
		}
	}
	return m.validateSGLang(bad)
}

// validateGroups checks the manifest's groups and their layers (ids and
// layer names unique) and returns the groups by id.
func (m *Manifest) validateGroups(bad func(string, string, ...any) error) (map[int]*Group, error) {
	groupIDs := map[int]*Group{}
	layerNames := map[string]string{}
	for gi := range m.Groups {
		g := &m.Groups[gi]
		gf := fmt.Sprintf("groups[%d]", gi)
		if g.ID < 0 || g.ID > 1<<30 {
			return nil, bad(gf+".id", "%d is not in 0..2^30", g.ID)
		}
		if groupIDs[g.ID] != nil {
			return nil, bad(gf+".id", "group id %d appears twice", g.ID)
		}
		groupIDs[g.ID] = g
		switch g.Kind {
		case KindFullAttention, KindMLA, KindMamba:
		case KindSlidingWindow:
			if g.SlidingWindow < 1 {
				return nil, bad(gf+".sliding_window", "a sliding_window group needs a window of at least 1 token, got %d", g.SlidingWindow)
			}
		default:
			return nil, bad(gf+".kind", "unknown kind %q (want full_attention, sliding_window, mla or mamba)", g.Kind)
		}
		if g.BlockSize < 1 || g.BlockSize > 1<<20 {
			return nil, bad(gf+".block_size", "%d is not in 1..2^20", g.BlockSize)
		}
		for li := range g.Layers {
			l := &g.Layers[li]
			lf := fmt.Sprintf("%s.layers[%d]", gf, li)
			if err := validateLayer(l, g, lf, m.Parallel.TPSize, bad); err != nil {
				return nil, err
			}
			if prev, dup := layerNames[l.Name]; dup {
				return nil, bad(lf+".name", "layer %q already appears at %s", l.Name, prev)
			}
			layerNames[l.Name] = lf
		}
	}
	return groupIDs, nil
}

// validateRequest checks one request (field rf) against the manifest's
// groups: its token counts, and the block tables, state blocks, block
// hashes and stored checksums it lists per group.
func (m *Manifest) validateRequest(r *Request, rf string, groupIDs map[int]*Group, bad func(string, string, ...any) error) error {
	if r.NumTokens < 0 || r.NumTokens > 1<<40 {
		return bad(rf+".num_tokens", "%d is not in 0..2^40", r.NumTokens)
	}
	if r.NumLocalComputedTokens < 0 || r.NumLocalComputedTokens > r.NumTokens {
		return bad(rf+".num_local_computed_tokens", "%d is not in 0..num_tokens (%d)", r.NumLocalComputedTokens, r.NumTokens)
	}
	for _, key := range sortedKeys(r.BlockTable) {
		f := fmt.Sprintf("%s.block_table[%q]", rf, key)
		g, err := groupByKey(groupIDs, key)
		if err != nil {
			return bad(f, "%v", err)
		}
		if g.Kind == KindMamba {
			return bad(f, "group %d holds state: give its block in state_block", g.ID)
		}
		for i, b := range r.BlockTable[key] {
			if b != NoBlock && (b < 0 || b >= m.NumBlocks) {
				return bad(fmt.Sprintf("%s[%d]", f, i), "block id %d out of range 0..%d", b, m.NumBlocks-1)
			}
		}
	}
	for _, key := range sortedKeys(r.StateBlock) {
		f := fmt.Sprintf("%s.state_block[%q]", rf, key)
		g, err := groupByKey(groupIDs, key)
		if err != nil {
			return bad(f, "%v", err)
		}
		if g.Kind != KindMamba {
			return bad(f, "group %d is not a state group", g.ID)
		}
		if b := r.StateBlock[key]; b < 0 || b >= m.NumBlocks {
			return bad(f, "block id %d out of range 0..%d", b, m.NumBlocks-1)
		}
	}
	for _, key := range sortedKeys(r.BlockHashes) {
		if _, err := groupByKey(groupIDs, key); err != nil {
			return bad(fmt.Sprintf("%s.block_hashes[%q]", rf, key), "%v", err)
		}
	}
	for _, key := range sortedKeys(r.StoredChecksums) {
		f := fmt.Sprintf("%s.stored_checksums[%q]", rf, key)
		if _, err := groupByKey(groupIDs, key); err != nil {
			return bad(f, "%v", err)
		}
		if len(r.StoredChecksums[key]) > len(r.BlockHashes[key]) {
			return bad(f, "%d stored checksums but %d block hashes", len(r.StoredChecksums[key]), len(r.BlockHashes[key]))
		}
		for i, s := range r.StoredChecksums[key] {
			if _, err := ParseHex64(s); err != nil {
				return bad(fmt.Sprintf("%s[%d]", f, i), "%v", err)
			}
		}
	}
	return nil
}

func validateLayer(l *Layer, g *Group, lf string, tp int, bad func(string, string, ...any) error) error {
	if l.Name == "" {
		return bad(lf+".name", "empty layer name")
	}
	if l.Dtype == "" && l.AliasOf == "" {
		return bad(lf+".dtype", "missing")
	}
	if l.Dtype != "" {
		if _, err := TorchDtype(l.Dtype); err != nil {
			return bad(lf+".dtype", "%v", err)
		}
	}
	if l.NumKVHeads < 0 || l.NumKVHeads > 1<<20 {
		return bad(lf+".num_kv_heads", "%d is not in 0..2^20", l.NumKVHeads)
	}
	if l.HeadSize < 0 || l.HeadSize > 1<<24 {
		return bad(lf+".head_size", "%d is not in 0..2^24", l.HeadSize)
	}
	if l.MaxTPShards != nil && *l.MaxTPShards < 1 {
		return bad(lf+".max_tp_shards", "%d is less than 1", *l.MaxTPShards)
	}
	if l.Replicas != nil && *l.Replicas < 1 {
		return bad(lf+".replicas", "%d is less than 1", *l.Replicas)
	}
	if l.Address != "" {
		if _, err := ParseHex64(l.Address); err != nil {
			return bad(lf+".address", "%v", err)
		}
	}
	if l.AliasOf != "" {
		if l.Source != nil {
			return bad(lf+".alias_of", "an alias has no tensor or source of its own")
		}
		if l.Address != "" {
			return bad(lf+".address", "an alias has no memory of its own: the address is its target's")
		}
		// An exporter walking vLLM's kv_caches sees a KV-sharing layer
		// with its target's tensor: accepted when it is that tensor.
		if l.Tensor != "" {
			if t := aliasTensor(g, l.AliasOf); t != l.Tensor {
				return bad(lf+".alias_of", "layer %q gives tensor %q and alias_of %q, whose tensor is %q: give alias_of alone, or the aliased layer's tensor", l.Name, l.Tensor, l.AliasOf, t)
			}
		}
		return nil
	}
	if l.Tensor == "" && l.Source == nil {
		return bad(lf+".tensor", "missing (give tensor, source or alias_of)")
	}
	if l.Tensor != "" && l.Source != nil {
		return bad(lf+".source", "give tensor or source, not both")
	}
	if s := l.Source; s != nil {
		if (s.File == "") == (s.CUDAIPC == "") {
			return bad(lf+".source", "give exactly one of file and cuda_ipc")
		}
		if s.Offset < 0 {
			return bad(lf+".source.offset", "%d is negative", s.Offset)
		}
		if _, err := ParseDtype(s.Dtype); err != nil {
			return bad(lf+".source.dtype", "%v", err)
		}
		if len(s.Shape) == 0 || len(s.Shape) > 16 {
			return bad(lf+".source.shape", "want 1 to 16 dimensions, got %d", len(s.Shape))
		}
		for i, d := range s.Shape {
			if d < 0 {
				return bad(fmt.Sprintf("%s.source.shape[%d]", lf, i), "%d is negative", d)
			}
		}
		if s.Strides != nil && len(s.Strides) != len(s.Shape) {
			return bad(lf+".source.strides", "%d strides for %d dimensions", len(s.Strides), len(s.Shape))
		}
		for i, d := range s.Strides {
			if d < 0 {
				return bad(fmt.Sprintf("%s.source.strides[%d]", lf, i), "%d is negative", d)
			}
		}
	}
	if len(l.Layout) == 0 {
		return bad(lf+".layout", "missing")
	}
	seen := map[string]bool{}
	for i, a := range l.Layout {
		if !slices.Contains(knownAxes, a) {
			return bad(fmt.Sprintf("%s.layout[%d]", lf, i), "unknown axis %q (want block, token, head, kv, dim, cell or page)", a)
		}
		if seen[a] {
			return bad(fmt.Sprintf("%s.layout[%d]", lf, i), "axis %q appears twice", a)
		}
		seen[a] = true
	}
	if g.Kind == KindMamba {
		if !slices.Equal(l.Layout, []string{"block", "page"}) {
			return bad(lf+".layout", "a state layer's layout is [\"block\", \"page\"], got %q", l.Layout)
		}
		if len(l.States) == 0 {
			return bad(lf+".states", "a state layer lists its states")
		}
		for i, st := range l.States {
			if st.Address == "" {
				continue
			}
			if _, err := ParseHex64(st.Address); err != nil {
				return bad(fmt.Sprintf("%s.states[%d].address", lf, i), "%v", err)
			}
		}
		return validateStates(l, lf, tp, bad)
	}
	if len(l.States) != 0 {
		return bad(lf+".states", "only state layers (kind mamba) have states")
	}
	if seen["page"] {
		return bad(lf+".layout", "axis \"page\" is for state layers only")
	}
	if !seen["block"] || !seen["token"] {
		return bad(lf+".layout", "needs a block and a token axis, got %q", l.Layout)
	}
	if seen["cell"] == (seen["dim"]) {
		return bad(lf+".layout", "needs exactly one of a cell or a dim axis, got %q", l.Layout)
	}
	if seen["cell"] && seen["kv"] {
		return bad(lf+".layout", "a cell axis holds K and V: no kv axis beside it, got %q", l.Layout)
	}
	if seen["dim"] && l.HeadSize == 0 {
		return bad(lf+".head_size", "missing (a dim axis needs the head size)")
	}
	return nil
}

func groupByKey(groups map[int]*Group, key string) (*Group, error) {
	id, err := strconv.Atoi(key)
	if err != nil || strconv.Itoa(id) != key {
		return nil, fmt.Errorf("key %q is not a group id", key)
	}
	g := groups[id]
	if g == nil {
		return nil, fmt.Errorf("no group with id %d", id)
	}
	return g, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Group returns the group with the given id, or nil.
func (m *Manifest) Group(id int) *Group {
	for i := range m.Groups {
		if m.Groups[i].ID == id {
			return &m.Groups[i]
		}
	}
	return nil
}

// Request returns the request with the given id, or nil.
func (m *Manifest) Request(id string) *Request {
	for i := range m.Requests {
		if m.Requests[i].ID == id {
			return &m.Requests[i]
		}
	}
	return nil
}

// Paired returns the request a transfer names by id: the one with that
// id, else the first that pairs with it (its producer_id is id), else nil
// (an empty id pairs with nothing).
// A NIXL log's transfer names a consumer request by either.
func (m *Manifest) Paired(id string) *Request {
	if r := m.Request(id); r != nil || id == "" {
		return r
	}
	for i := range m.Requests {
		if m.Requests[i].ProducerID == id {
			return &m.Requests[i]
		}
	}
	return nil
}

// aliasTensor follows alias_of from layer name through g's layers to the
// tensor that holds the cache ("" when none does).
func aliasTensor(g *Group, name string) string {
	for range len(g.Layers) + 1 {
		i := slices.IndexFunc(g.Layers, func(x Layer) bool { return x.Name == name })
		if i < 0 {
			return ""
		}
		if g.Layers[i].AliasOf == "" || g.Layers[i].Tensor != "" {
			return g.Layers[i].Tensor
		}
		name = g.Layers[i].AliasOf
	}
	return ""
}
