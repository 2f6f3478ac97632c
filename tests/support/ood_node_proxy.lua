-- The portal's node proxy for the Open OnDemand app's tests, done the way Open OnDemand 4.0's
-- mod_ood_proxy does it (node_proxy.lua and ood/proxy.lua, run from a LuaHookFixups hook):
-- /node/HOST/PORT/rest goes to http://HOST:PORT/node/HOST/PORT/rest, or ws:// when the browser
-- asks for an Upgrade, handed to mod_proxy as a reverse-proxy request. The Host header is not
-- preserved (the backend sees HOST:PORT), as on a real portal. No user mapping: the test has
-- one user. The request target goes on as the browser sent it (still percent-encoded, with its
-- query string): this hook runs after mod_proxy's own fixup, which would otherwise add them.
function node_proxy_handler(r)
  local host = r.subprocess_env["MATCH_HOST"]
  local port = r.subprocess_env["MATCH_PORT"]
  local scheme = r.headers_in["Upgrade"] and "ws://" or "http://"
  local uri = r.unparsed_uri ~= "" and r.unparsed_uri or "/"

  r.handler = "proxy-server"
  r.proxyreq = apache2.PROXYREQ_REVERSE
  r.filename = "proxy:" .. scheme .. host .. ":" .. port .. uri
  r.headers_in["X-Forwarded-Proto"] = r.is_https and "https" or "http"
  r.headers_in["X-Forwarded-User"] = r.user or ""
  r.headers_in["X-Forwarded-Escaped-Uri"] = r:escape(uri)
  r:custom_response(503, "Failed to connect to " .. host .. ":" .. port)
  return apache2.DECLINED
end
