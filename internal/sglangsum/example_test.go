package sglangsum_test

import (
	"fmt"

	"github.com/kvaudit/kvaudit/internal/sglangsum"
)

// SGLang's value of a request: its pages from req_to_token, then Adler-32
// over every buffer at those pages. Two 8-byte slots a page, two buffers.
func ExampleAdler32() {
	k := make([]byte, 8*16) // 8 pages of 2 slots of 8 bytes
	v := make([]byte, 8*16)
	copy(k[5*16:], "K-page5-tokens01")
	copy(k[2*16:], "K-page2-token2..")
	copy(v[5*16:], "V-page5-tokens01")
	copy(v[2*16:], "V-page2-token2..")
	row := []int64{10, 11, 4} // req_to_token: 3 tokens on pages 5 and 2
	pages, _ := sglangsum.Pages(row, 2, 0, 3)
	bufs := []sglangsum.Buffer{{Data: k, ItemLen: 16}, {Data: v, ItemLen: 16}}
	value, _ := sglangsum.Adler32([]sglangsum.Segment{{Buffers: bufs, Indices: pages}}, 0)
	fmt.Println(pages)
	fmt.Printf("%#08x %#08x\n", value, sglangsum.Adler32Sum([]byte("K-page5-tokens01K-page2-token2..V-page5-tokens01V-page2-token2..")))
	// Output:
	// [5 2]
	// 0xb7de1535 0xb7de1535
}
