package layerserve

// Version is this client's version, the project's one version (the top-level
// VERSION file; scripts/set-version rewrites this line). Dial sends it in the
// user-agent, "layerserve-go/<Version>".
const Version = "0.1.0"
