# Builds the operator, the fence CLI and the fence gateway as static binaries on a distroless,
# non-root base. test/install builds exactly what this file builds (its COPY
# and RUN lines) on every test run, since no Docker engine runs there.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
COPY pkg/ pkg/
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/manager ./cmd/manager && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/fence ./cmd/fence && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/fence-gateway ./cmd/fence-gateway

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/manager /manager
COPY --from=build /out/fence /fence
COPY --from=build /out/fence-gateway /fence-gateway
USER 65532:65532
ENTRYPOINT ["/manager"]
