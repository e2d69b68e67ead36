#!/bin/sh
# Smoke test of an image with this layer, in a sandbox like sclate's (docker-init, no
# capabilities, no network; the memory server's commands run as user `hindsight`).
#
#   smoke.sh IMAGE SOCKET_DIR MODEL [EXTRACTION_MODE]
#
# SOCKET_DIR holds model.sock, an OpenAI-style server (chat + /v1/embeddings), e.g.
#   .venv/bin/python -m sclated.model --port 18555 &
#   socat UNIX-LISTEN:/tmp/hs-smoke/model.sock,fork,mode=777 TCP:127.0.0.1:18555 &
# MODEL is its chat model (GET /v1/models). EXTRACTION_MODE (HINDSIGHT_API_RETAIN_
# EXTRACTION_MODE): concise (Hindsight's default, one extraction call per item) or
# chunks (no extraction call). Prints the seconds each step took.
set -eu
image=$1 sockdir=$2 model=$3 mode=${4:-concise}
c=hs-smoke-$$
trap 'docker rm -f "$c" >/dev/null 2>&1' EXIT
docker run -d --name "$c" --init --cap-drop ALL --security-opt no-new-privileges:true --network none \
  -v "$sockdir:/run/hs" -e SCLATE_MODEL_PORT=4002 -e SCLATE_MODEL_SOCK=/run/hs/model.sock "$image" >/dev/null
as_hs() {
  docker exec --user hindsight -e SCLATE_MEMORY_SYSTEM_BASE_URL=http://127.0.0.1:4002/v1 -e "SCLATE_MEMORY_SYSTEM_MODEL=$model" \
    -e "HINDSIGHT_API_RETAIN_EXTRACTION_MODE=$mode" "$c" sclate-hindsight "$@"
}
api() {  # METHOD PATH [JSON]
  docker exec "$c" python3 -c 'import json, sys, urllib.request as u
m, p = sys.argv[1], sys.argv[2]
d = sys.argv[3].encode() if len(sys.argv) > 3 else None
r = u.Request("http://127.0.0.1:8888" + p, data=d, method=m, headers={"Content-Type": "application/json"})
print(u.urlopen(r, timeout=1800).read().decode()[:600])' "$@"
}
step() {  # NAME COMMAND...
  name=$1; shift
  t0=$(date +%s.%N); out=$("$@"); t1=$(date +%s.%N)
  printf '%-12s %8.2fs  %s\n' "$name" "$(echo "$t1 - $t0" | bc)" "$(printf '%s' "$out" | tr '\n' ' ' | cut -c1-160)"
}
bank=/v1/default/banks/smoke
recall='{"query": "What is the name of my cat?", "max_tokens": 512}'
step start as_hs start
step bank api PUT "$bank" '{"name": "smoke"}'
step retain api POST "$bank/memories" '{"async": false, "items": [
  {"content": "user: I adopted a cat named Miso last week.\nassistant: Congratulations!"},
  {"content": "user: My sister Lena lives in Lisbon.\nassistant: A beautiful city."},
  {"content": "user: I am allergic to peanuts.\nassistant: Noted."}]}'
step recall api POST "$bank/memories/recall" "$recall"
step consolidate docker exec "$c" sclate-hindsight consolidate --bank smoke
step stop as_hs stop
step start2 as_hs start
step recall2 api POST "$bank/memories/recall" "$recall"
step stop2 as_hs stop
