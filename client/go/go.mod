module github.com/layerserve/layerserve/client/go

// Go 1.19, grpc-go 1.33.3 and protobuf-go 1.28.1: what Debian bookworm ships, the
// versions CI builds from (offline, from Debian's sources: CMakeLists.txt).
go 1.19

require (
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)

// The modules of the packages grpc-go imports, at the versions the go.mod files of
// grpc-go v1.33.3 (x/net, x/sys, genproto), protobuf-go v1.28.1 (golang/protobuf)
// and x/net (x/text) ask for. Written by hand: this tree's CI has no module proxy
// for `go mod tidy`, which may raise them; a user's build takes the highest anyway.
require (
	github.com/golang/protobuf v1.5.0 // indirect
	golang.org/x/net v0.0.0-20190311183353-d8887717615a // indirect
	golang.org/x/sys v0.0.0-20190215142949-d0b11bdaac8a // indirect
	golang.org/x/text v0.3.0 // indirect
	google.golang.org/genproto v0.0.0-20200526211855-cb27e3aa2013 // indirect
)
