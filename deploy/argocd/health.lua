-- Argo CD health check for deepinfer.io/DeepInferDeployment.
-- The kstatus rules of src/api/kstatus.rs, in the same order and with the same messages:
--   no status, or status.observedGeneration behind metadata.generation -> Progressing
--   Stalled=True (needs a change by a person)                          -> Degraded
--   Reconciling=True                                                   -> Progressing
--   Ready=False with reason Paused or Suspended (held by a person)     -> Suspended
--   Ready=True for the current generation                              -> Healthy
--   anything else (Ready False/Unknown/missing)                        -> Progressing
-- Install: argocd-cm key resource.customizations.health.deepinfer.io_DeepInferDeployment
-- (see docs/gitops.md).

local hs = {}

local function condition(status, ctype)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end

-- "<reason>: <message>", or whichever of the two is present.
local function describe(c)
  local reason = c.reason or ""
  local message = c.message or ""
  if reason ~= "" and message ~= "" then
    return reason .. ": " .. message
  elseif reason ~= "" then
    return reason
  elseif message ~= "" then
    return message
  end
  return tostring(c.type) .. "=" .. tostring(c.status)
end

-- Integers print without a fraction in every Lua Argo CD may embed.
local function int(n)
  return tostring(math.floor(n))
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "the operator has not reported a status yet"
  return hs
end

local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end
local observed = obj.status.observedGeneration
if observed == nil then
  hs.status = "Progressing"
  hs.message = "the status has no observedGeneration yet"
  return hs
end
if generation ~= nil and observed ~= generation then
  hs.status = "Progressing"
  hs.message = "the operator has observed generation " .. int(observed) .. ", not yet " .. int(generation)
  return hs
end

local stalled = condition(obj.status, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled)
  return hs
end

local reconciling = condition(obj.status, "Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(reconciling)
  return hs
end

local ready = condition(obj.status, "Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "the status has no Ready condition yet"
  return hs
end
-- A Ready condition written for an older generation says nothing about this one.
local current = ready.observedGeneration == nil or generation == nil or ready.observedGeneration == generation
-- Held on purpose (spec.paused, spec.suspend): Argo CD's word for it, which degrades nothing.
if ready.status == "False" and current and (ready.reason == "Paused" or ready.reason == "Suspended") then
  hs.status = "Suspended"
  hs.message = describe(ready)
  return hs
end
if ready.status == "True" and current then
  hs.status = "Healthy"
else
  hs.status = "Progressing"
end
hs.message = describe(ready)
return hs
