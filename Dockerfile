# The gateway's container image: the static binary on scratch, run as the
# nonroot user, with a CA bundle. `make image` writes the same image without a
# container engine (scripts/image); scripts/image/dockerfile checks that the
# two agree and that this file parses.
#
# It builds with BuildKit, the legacy builder and ACR Tasks (`azd deploy`
# with remoteBuild): no FROM takes --platform, because ACR's dependency
# scanner cannot read the flag (Azure/acr#697), and there is no `# syntax=`
# line, so BuildKit uses its built-in frontend and fetches nothing extra.
#
# The build stage is the Microsoft build of Go from MCR, never Docker Hub:
# ACR Tasks pull anonymously from shared egress addresses, and Docker Hub's
# anonymous pull limit fails such builds with toomanyrequests.
# The tag is the exact Go release go.mod names (scripts/image/dockerfile's
# TestBaseImage checks both), and GOTOOLCHAIN=local makes a mismatch fail
# the build instead of fetching another toolchain. MS_GO_NOSYSTEMCRYPTO=1:
# that build links OpenSSL through cgo by default, which a static binary
# on scratch cannot use; with it the binary uses Go's own crypto, as
# upstream Go builds it.
FROM mcr.microsoft.com/oss/go/microsoft/golang:1.26.10 AS build
# BuildKit sets TARGETARCH to the platform being built, and this stage runs
# as that platform (emulated on a host of another one); the legacy builder
# and ACR leave it empty, and Go builds for the stage's own architecture.
# No default here: a default would override BuildKit's value.
ARG TARGETARCH
WORKDIR /src
ENV GOTOOLCHAIN=local MS_GO_NOSYSTEMCRYPTO=1
# No separate `go mod download`: it would fetch every module in go.mod,
# tooling included (50 MB); go build fetches only what the gateway links.
# What the build reads, and all that .dockerignore lets into the context.
COPY go.mod go.sum ./
COPY functions/ functions/
COPY shared/ shared/
RUN CGO_ENABLED=0 GOOS=linux GOARCH="${TARGETARCH:-$(go env GOARCH)}" \
    go build -tags lambda.norpc -trimpath -ldflags='-s -w' -o /rootfs/gateway ./functions/gateway \
 && mkdir -p /rootfs/etc/ssl/certs /rootfs/home/nonroot /rootfs/tmp \
 && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ca-certificates.crt \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /rootfs/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' > /rootfs/etc/group \
 && chmod 0700 /rootfs/home/nonroot \
 && chmod 1777 /rootfs/tmp

FROM scratch
COPY --from=build /rootfs/ /
COPY --from=build --chown=65532:65532 /rootfs/home/ /home/
USER 65532:65532
WORKDIR /
ENV PORT=8080 SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
EXPOSE 8080
ENTRYPOINT ["/gateway"]
