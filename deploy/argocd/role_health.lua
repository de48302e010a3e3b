-- Argo CD health check for deepinfer.io/DeepInferRole: the group count of a role scaled
-- externally (an autoscaler writes spec.replicas through /scale; the operator writes
-- status.replicas, the groups of the role that serve).
--   no status yet                            -> Progressing
--   status.replicas >= spec.replicas         -> Healthy
--   fewer groups serve than asked            -> Progressing
-- Install: argocd-cm key resource.customizations.health.deepinfer.io_DeepInferRole
-- (see docs/gitops.md).

local hs = {}

local function int(n)
  return tostring(math.floor(n))
end

local wanted = 0
if obj.spec ~= nil and obj.spec.replicas ~= nil then
  wanted = obj.spec.replicas
end
if obj.status == nil or obj.status.replicas == nil then
  hs.status = "Progressing"
  hs.message = "the operator has not reported the role's serving groups yet"
  return hs
end
local serving = obj.status.replicas
if serving >= wanted then
  hs.status = "Healthy"
else
  hs.status = "Progressing"
end
hs.message = int(serving) .. " of " .. int(wanted) .. " group(s) serve"
return hs
