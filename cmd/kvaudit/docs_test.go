package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/rogpeppe/go-internal/testscript"
)

// repoRoot is the repository's root, seen from this package's directory.
var repoRoot = filepath.Join("..", "..")

// docPages returns README.md and every docs/*.md page, as paths from
// repoRoot (slash-separated).
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(repoRoot, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

// TestDocsWalkthrough runs the console blocks of every docs/*.md page as
// TestReadmeWalkthrough runs README.md's: each page on its own, in an empty
// directory, its commands in order, each exiting and printing what the page
// shows. A page's commands make what it needs (its own synth runs), so a
// page can be followed alone.
func TestDocsWalkthrough(t *testing.T) {
	dir := t.TempDir()
	var files, pages []string
	for _, page := range docPages(t)[1:] {
		b, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("```console")) {
			continue
		}
		script, n, err := walkthroughScript(string(b))
		if err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		if n == 0 {
			t.Fatalf("%s has a console block with no command", page)
		}
		name := strings.TrimSuffix(filepath.Base(page), ".md")
		file := filepath.Join(dir, name+".txtar")
		if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		files, pages = append(files, file), append(pages, page)
	}
	// The pages whose console blocks left README.md: without them this
	// test would pass having run nothing.
	for _, want := range []string{"docs/transfers.md", "docs/vllm.md", "docs/scale-out.md"} {
		if !slices.Contains(pages, want) {
			t.Errorf("%s has no console block to run", want)
		}
	}
	testscript.Run(t, scriptParams(testscript.Params{Files: files}))
}

var (
	fence      = regexp.MustCompile("(?m)^```[^\n]*\n(?:.*\n)*?```[^\n]*$")
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	mdLink     = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	headingRe  = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	urlScheme  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z+.-]*:`)
)

// prose is a Markdown page without its fenced code blocks (their lines
// blanked, so line numbers hold) and, when spans is set, without its code
// spans.
func prose(page string, spans bool) string {
	page = fence.ReplaceAllStringFunc(page, func(s string) string {
		return strings.Repeat("\n", strings.Count(s, "\n"))
	})
	if spans {
		page = codeSpan.ReplaceAllString(page, "``")
	}
	return page
}

// anchors returns the fragment ids a Markdown page's headings get on
// GitHub: the heading's text lower-cased, its spaces made hyphens, every
// character but letters, digits, '-' and '_' dropped, and a repeated id
// suffixed -1, -2, ...; and any <a id> or <a name>.
func anchors(page string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRe.FindAllStringSubmatch(prose(page, false), -1) {
		text := linkText.ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			seen[id]++
			id += "-" + strconv.Itoa(n)
		} else {
			seen[id] = 1
		}
		out[id] = true
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(page, -1) {
		out[m[1]] = true
	}
	return out
}

func TestAnchors(t *testing.T) {
	page := "# kvaudit\n## The GPU engine (optional): kvaudit-cuda\n## Compare: `kvaudit diff`\n" +
		"## Bit-identical with vLLM's KV checksums\n### 13. Transfers: NIXL\n## Notes\n## Notes\n" +
		"```console\n# kvaudit diff: verified\n```\n<a id=\"here\"></a>\n"
	got := anchors(page)
	for _, want := range []string{"kvaudit", "the-gpu-engine-optional-kvaudit-cuda", "compare-kvaudit-diff",
		"bit-identical-with-vllms-kv-checksums", "13-transfers-nixl", "notes", "notes-1", "here"} {
		if !got[want] {
			t.Errorf("anchors: no %q in %v", want, got)
		}
	}
	if got["kvaudit-diff-verified"] {
		t.Error("anchors: a comment in a code block made an anchor")
	}
}

// TestDocLinks checks every relative link of README.md, docs/*.md and the
// READMEs they send readers to (examples/vllm's, internal/kernels'): links
// and images, outside code. The file or directory a link names exists, and
// the fragment it names, in this page or in another Markdown page, is one
// of that page's headings.
func TestDocLinks(t *testing.T) {
	pageAnchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := pageAnchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(path)))
		if err != nil {
			return nil, err
		}
		pageAnchors[path] = anchors(string(b))
		return pageAnchors[path], nil
	}
	links := 0
	for _, page := range append(docPages(t), "examples/vllm/README.md", "internal/kernels/README.md") {
		b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(page)))
		if err != nil {
			t.Fatal(err)
		}
		fences := 0
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "```") {
				fences++
			}
		}
		if fences%2 != 0 {
			t.Errorf("%s: %d code fence lines: a code block is not closed", page, fences)
		}
		text := prose(string(b), true)
		for _, m := range mdLink.FindAllStringSubmatchIndex(text, -1) {
			target := text[m[2]:m[3]]
			line := 1 + strings.Count(text[:m[0]], "\n")
			if urlScheme.MatchString(target) {
				continue // https:, mailto:
			}
			links++
			path, frag, _ := strings.Cut(target, "#")
			if path == "" {
				path = page
			} else {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(page), path))
				if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(path))); err != nil {
					t.Errorf("%s:%d: link to %s: %s does not exist", page, line, target, path)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s:%d: link to %s: a fragment of a file that is not Markdown", page, line, target)
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s:%d: link to %s: %v", page, line, target, err)
				continue
			}
			if !a[frag] {
				t.Errorf("%s:%d: link to %s: %s has no heading #%s", page, line, target, path, frag)
			}
		}
	}
	if links < 50 {
		t.Errorf("found %d relative links in README.md and docs/*.md; the pages hold more (is the link pattern right?)", links)
	}
}

// TestArchitecturePackages holds docs/architecture.md's package map to the
// module's packages: every package `go list ./...` lists (but examples/)
// has a row (a table row whose first cell is the package's path in code),
// every row names a package that exists, and, as the page says, each
// public package imports only the public packages of the rows above it.
func TestArchitecturePackages(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	cmd := exec.Command(goTool, "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	const module = "github.com/kvaudit/kvaudit/"
	imports := map[string][]string{} // package -> the module's packages it imports
	var want []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		p := strings.TrimPrefix(f[0], module)
		if p == "examples" || strings.HasPrefix(p, "examples/") {
			continue
		}
		want = append(want, p)
		for _, q := range f[1:] {
			if q, ok := strings.CutPrefix(q, module); ok {
				imports[p] = append(imports[p], q)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_./-]+)` \\|")
	var got []string
	for _, m := range row.FindAllStringSubmatch(prose(string(b), false), -1) {
		got = append(got, m[1])
	}
	for _, p := range want {
		if !slices.Contains(got, p) {
			t.Errorf("docs/architecture.md has no row for package %s", p)
		}
	}
	for _, p := range got {
		if !slices.Contains(want, p) {
			t.Errorf("docs/architecture.md has a row for %s, which `go list ./...` does not list", p)
		}
	}
	public := func(p string) bool {
		return !strings.HasPrefix(p, "internal/") && !strings.HasPrefix(p, "cmd/") && !strings.Contains(p, "/internal/")
	}
	for i, p := range got {
		if !public(p) {
			continue
		}
		for _, q := range imports[p] {
			if public(q) && !slices.Contains(got[:i], q) {
				t.Errorf("docs/architecture.md: %s imports %s, which is not in a row above it", p, q)
			}
		}
	}
	if len(want) < 20 {
		t.Errorf("go list ./... listed %d packages: %q", len(want), want)
	}
}

// TestFaultKindsDocumented holds docs/faults.md's list of fault kinds to
// inject's registry: every kind `kvaudit inject --fault` takes is named
// there, in code, under "Fault kinds".
func TestFaultKindsDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "faults.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Fault kinds\n")
	if !ok {
		t.Fatal(`docs/faults.md has no "## Fault kinds" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	named := map[string]bool{}
	for _, m := range codeSpan.FindAllString(section, -1) {
		named[strings.Trim(m, "`")] = true
	}
	n := 0
	for _, k := range inject.Kinds() {
		n++
		if !named[string(k)] {
			t.Errorf("docs/faults.md's Fault kinds does not name %s", k)
		}
	}
	if n < 20 {
		t.Errorf("inject.Kinds() has %d kinds", n)
	}
}

// TestReadmeFrontDoor holds README.md to what it is for (issue #34): a
// front door of at most 500 lines, with the two commands of a fresh
// machine, that links every docs/*.md page.
func TestReadmeFrontDoor(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if n := strings.Count(readme, "\n"); n > 500 {
		t.Errorf("README.md has %d lines; at most 500 (move the detail to a docs/ page)", n)
	}
	for _, want := range []string{"go run ./cmd/kvaudit demo", "go test ./..."} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md does not show %q", want)
		}
	}
	linked := map[string]bool{}
	for _, m := range mdLink.FindAllStringSubmatch(prose(readme, true), -1) {
		path, _, _ := strings.Cut(m[1], "#")
		linked[path] = true
	}
	for _, page := range docPages(t)[1:] {
		if !linked[page] {
			t.Errorf("README.md does not link %s", page)
		}
	}
}

// goNames returns the top-level names of the Go package in dir (every
// non-test file, whatever its build tags): functions, types, constants and
// variables by name, methods and struct fields as Type.Name.
func goNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					names[d.Name.Name] = true
					continue
				}
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if ix, ok := typ.(*ast.IndexExpr); ok {
					typ = ix.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					names[id.Name+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, field := range st.Fields.List {
								for _, n := range field.Names {
									names[s.Name.Name+"."+n.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return names
}

// TestDocGoNames checks the Go names README.md and docs/*.md give in code
// (`verify.Compare`, `layout.Manifest.SGLangPages`, `nixl.PullTokens`):
// each is declared in its package, so that a name renamed, moved or
// unexported does not stay in the documentation.
func TestDocGoNames(t *testing.T) {
	pkgs := map[string]string{
		"parse": "parse", "layout": "layout", "wire": "wire", "checksum": "checksum",
		"transfer": "transfer", "side": "side", "verify": "verify", "drill": "verify/drill",
		"scrub": "scrub", "nixl": "internal/nixl", "report": "internal/report",
		"inject": "internal/inject", "synth": "internal/synth",
	}
	ref := regexp.MustCompile(`^([a-z]+)\.([A-Z]\w*(?:\.[A-Z]\w*)?)(?:\(\))?$`)
	names := map[string]map[string]bool{}
	checked := 0
	for _, page := range docPages(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		text := prose(string(b), false)
		for _, span := range codeSpan.FindAllString(text, -1) {
			m := ref.FindStringSubmatch(strings.Trim(span, "`"))
			if m == nil {
				continue
			}
			dir, ok := pkgs[m[1]]
			if !ok {
				continue
			}
			if names[dir] == nil {
				names[dir] = goNames(t, filepath.Join(repoRoot, filepath.FromSlash(dir)))
			}
			checked++
			if !names[dir][m[2]] {
				t.Errorf("%s names %s, which package %s does not declare", page, span, dir)
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d Go names in README.md and docs/*.md; the pages give more", checked)
	}
}
