# syntax=docker/dockerfile:1
# The operator image: two static binaries on a distroless non-root base, `deepinfer-operator`
# (the controller) and `deepinfer-runner` (the Jobs' entrypoints and the acceptance judge; the
# controller's binary carries none of its code). Static, because `install-runner` copies the
# runner into the DeepInfer engine image for acceptance runs, whatever libc that image has.
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/deepinfer/deepinfer-operator:0.1.0 .

FROM rust:1-bookworm AS build
# TARGETARCH is set by BuildKit; each platform builds natively (or under emulation).
ARG TARGETARCH
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/*
RUN case "${TARGETARCH:-amd64}" in \
      amd64) echo x86_64-unknown-linux-musl ;; \
      arm64) echo aarch64-unknown-linux-musl ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
    esac > /rust-target \
    && rustup target add "$(cat /rust-target)"
# ring's C and assembly parts are built with musl-gcc for either musl target.
ENV CC_x86_64_unknown_linux_musl=musl-gcc \
    CC_aarch64_unknown_linux_musl=musl-gcc
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --target "$(cat /rust-target)" \
        --package deepinfer-operator --bin deepinfer-operator --bin deepinfer-runner \
    && cp "target/$(cat /rust-target)/release/deepinfer-operator" \
          "target/$(cat /rust-target)/release/deepinfer-runner" /

# CA certificates, /etc/passwd with nonroot (65532), no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="deepinfer-operator" \
      org.opencontainers.image.description="Runs DeepInfer as a verified, pinned, placed service on NVIDIA and Ascend clusters" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /deepinfer-operator /deepinfer-runner /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["deepinfer-operator"]
CMD ["run"]
