// Package apicheck writes the exported API of a Go package as text, one
// sorted line per exported name with its signature, in the manner of Go's
// own api/*.txt files: what a reviewer reads to see an API change. It
// reads source with go/parser and prints types with go/printer, as
// written (qualified by the source's import names), for the default build
// of linux/amd64 without cgo. It is for kvaudit's own API test
// (api_test.go), not API.
package apicheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Lines returns the exported API of the package in dir, whose import path
// is path: one line per exported constant, variable, function, type,
// struct field, interface method and method of an exported type, each
// prefixed "pkg PATH, ", sorted.
func Lines(dir, path string) ([]string, error) {
	ctxt := build.Default
	ctxt.GOOS, ctxt.GOARCH, ctxt.CgoEnabled, ctxt.BuildTags = "linux", "amd64", false, nil
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	w := &writer{fset: fset, prefix: "pkg " + path + ", "}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := ctxt.MatchFile(dir, name); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			w.decl(d)
		}
	}
	if w.err != nil {
		return nil, w.err
	}
	slices.Sort(w.lines)
	return slices.Compact(w.lines), nil
}

type writer struct {
	fset   *token.FileSet
	prefix string
	lines  []string
	err    error
}

func (w *writer) add(format string, args ...any) {
	w.lines = append(w.lines, w.prefix+fmt.Sprintf(format, args...))
}

// expr prints an expression on one line.
func (w *writer) expr(x ast.Expr) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, w.fset, x); err != nil && w.err == nil {
		w.err = err
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

func (w *writer) decl(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		w.funcDecl(d)
	case *ast.GenDecl:
		switch d.Tok {
		case token.CONST, token.VAR:
			w.values(d)
		case token.TYPE:
			for _, s := range d.Specs {
				w.typeSpec(s.(*ast.TypeSpec))
			}
		}
	}
}

// values lists exported constants and variables: with their type when
// the declaration gives one (a constant repeating the one before, as
// after iota, has its type), else with their value.
func (w *writer) values(d *ast.GenDecl) {
	kind := "const"
	if d.Tok == token.VAR {
		kind = "var"
	}
	var typ ast.Expr
	for _, s := range d.Specs {
		v := s.(*ast.ValueSpec)
		if d.Tok == token.CONST && (v.Type != nil || len(v.Values) > 0) {
			typ = v.Type
		}
		if d.Tok == token.VAR {
			typ = v.Type
		}
		for i, n := range v.Names {
			if !n.IsExported() {
				continue
			}
			switch {
			case typ != nil:
				w.add("%s %s %s", kind, n.Name, w.expr(typ))
			case i < len(v.Values):
				w.add("%s %s = %s", kind, n.Name, w.expr(v.Values[i]))
			default:
				w.add("%s %s", kind, n.Name)
			}
		}
	}
}

func (w *writer) funcDecl(d *ast.FuncDecl) {
	if !d.Name.IsExported() {
		return
	}
	sig := strings.TrimPrefix(w.expr(unnamed(d.Type)), "func")
	if d.Recv == nil {
		w.add("func %s%s", d.Name.Name, sig)
		return
	}
	recv := d.Recv.List[0].Type
	base := recv
	if s, ok := base.(*ast.StarExpr); ok {
		base = s.X
	}
	switch b := base.(type) {
	case *ast.IndexExpr:
		base = b.X
	case *ast.IndexListExpr:
		base = b.X
	}
	if id, ok := base.(*ast.Ident); !ok || !id.IsExported() {
		return
	}
	w.add("method (%s) %s%s", w.expr(recv), d.Name.Name, sig)
}

func (w *writer) typeSpec(s *ast.TypeSpec) {
	if !s.Name.IsExported() {
		return
	}
	name := s.Name.Name
	if s.TypeParams != nil {
		name += "[" + strings.TrimSuffix(strings.TrimPrefix(w.expr(&ast.FuncType{Params: s.TypeParams}), "func("), ")") + "]"
	}
	if s.Assign.IsValid() {
		w.add("type %s = %s", name, w.expr(s.Type))
		return
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		w.add("type %s struct", name)
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 {
				if embeddedExported(f.Type) {
					w.add("type %s struct, embedded %s", name, w.expr(f.Type))
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					w.add("type %s struct, %s %s", name, n.Name, w.expr(unnamed(f.Type)))
				}
			}
		}
	case *ast.InterfaceType:
		w.add("type %s interface", name)
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				w.add("type %s interface, embedded %s", name, w.expr(m.Type))
				continue
			}
			for _, n := range m.Names {
				if n.IsExported() {
					w.add("type %s interface, %s%s", name, n.Name, strings.TrimPrefix(w.expr(unnamed(m.Type)), "func"))
				} else {
					w.add("type %s interface, unexported methods", name)
				}
			}
		}
	default:
		w.add("type %s %s", name, w.expr(unnamed(s.Type)))
	}
}

// embeddedExported says whether an embedded field's type is exported.
func embeddedExported(x ast.Expr) bool {
	if s, ok := x.(*ast.StarExpr); ok {
		x = s.X
	}
	switch t := x.(type) {
	case *ast.Ident:
		return t.IsExported()
	case *ast.SelectorExpr:
		return t.Sel.IsExported()
	}
	return false
}

// unnamed returns a function type without its parameter and result names
// (one entry per name), and any other expression as it is: names do not
// change an API.
func unnamed(x ast.Expr) ast.Expr {
	ft, ok := x.(*ast.FuncType)
	if !ok {
		return x
	}
	strip := func(l *ast.FieldList) *ast.FieldList {
		if l == nil {
			return nil
		}
		out := &ast.FieldList{}
		for _, f := range l.List {
			n := max(len(f.Names), 1)
			for range n {
				out.List = append(out.List, &ast.Field{Type: unnamed(f.Type)})
			}
		}
		return out
	}
	return &ast.FuncType{TypeParams: ft.TypeParams, Params: strip(ft.Params), Results: strip(ft.Results)}
}
