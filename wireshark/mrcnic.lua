-- mrcnic.lua: a Wireshark / tshark dissector for mrcnic's RoCEv2 frames (wire format v1).
--
-- Decodes what Wireshark's own InfiniBand dissector does not know: the MRC SACK extension
-- after the AETH (echoed EV, flags ECN_ECHO / TRIM_NACK / PROBE_REPLY, SACK base PSN,
-- 64-bit bitmap, probe timestamp), trim NACKs, EV probes (BTH OpCode 0xC0) and probe
-- replies, trimmed data frames (payload cut by a switch), and the EV a data frame or probe
-- was sprayed on (flow label + UDP source port).  It takes UDP port 4791 over from the
-- InfiniBand dissector.  Layouts: docs/wire-format.md sections 6-14 (this file follows it;
-- mrcnic/wire.py is the reference).
--
-- Load it for one run:   tshark -X lua_script:wireshark/mrcnic.lua -r sim.pcapng
--                        wireshark -X lua_script:wireshark/mrcnic.lua sim.pcapng
-- or copy it to the personal plugin folder (Help > About > Folders, "Personal Lua Plugins",
-- e.g. ~/.local/lib/wireshark/plugins/).  The installed copy: python -c "import
-- mrcnic.resources as r; print(r.dissector_path())".
--
-- Display filters: mrcnic, mrcnic.kind == "trim NACK", mrcnic.sack.ev == 0x1a,
-- mrcnic.sack.flags.trim_nack == 1, mrcnic.trimmed, mrcnic.probe.ev, mrcnic.bth.psn, ...
-- The ICRC is shown, not checked: it is computed over the frame as the receiver gets it
-- (the uSID destination address shifted to the receiver's own uSID), see
-- docs/wire-format.md "Checking ICRCs".

local mrc = Proto("mrcnic", "mrcnic RoCEv2 / MRC (wire format v1)")

local OPCODES = {
    [0x0A] = "RC RDMA WRITE ONLY",
    [0x0B] = "RC RDMA WRITE ONLY with Immediate",
    [0x11] = "RC ACKNOWLEDGE",
    [0xC0] = "MRC EV probe",
}
local SYNDROMES = { [0x1F] = "ACK", [0x60] = "NAK (PSN sequence error: trim NACK)" }

local f = mrc.fields
f.kind = ProtoField.string("mrcnic.kind", "Kind")
f.ev = ProtoField.uint32("mrcnic.ev", "EV (flow label + UDP source port)", base.HEX)
f.trimmed = ProtoField.bool("mrcnic.trimmed", "Trimmed (payload cut by a switch)")
-- BTH (12 bytes)
f.opcode = ProtoField.uint8("mrcnic.bth.opcode", "OpCode", base.HEX, OPCODES)
f.se = ProtoField.uint8("mrcnic.bth.se", "Solicited event", base.DEC, nil, 0x80)
f.migreq = ProtoField.uint8("mrcnic.bth.migreq", "MigReq", base.DEC, nil, 0x40)
f.padcnt = ProtoField.uint8("mrcnic.bth.padcnt", "PadCnt", base.DEC, nil, 0x30)
f.tver = ProtoField.uint8("mrcnic.bth.tver", "TVer", base.DEC, nil, 0x0F)
f.pkey = ProtoField.uint16("mrcnic.bth.pkey", "P_Key", base.HEX)
f.becn = ProtoField.uint8("mrcnic.bth.fecn_becn", "FECN / BECN / reserved", base.HEX)
f.dqpn = ProtoField.uint24("mrcnic.bth.dqpn", "DestQP", base.HEX)
f.ackreq = ProtoField.uint8("mrcnic.bth.ackreq", "AckReq", base.DEC, nil, 0x80)
f.psn = ProtoField.uint24("mrcnic.bth.psn", "PSN", base.DEC)
-- RETH (16), ImmDt (4)
f.va = ProtoField.uint64("mrcnic.reth.va", "Remote VA", base.HEX)
f.rkey = ProtoField.uint32("mrcnic.reth.rkey", "R_Key", base.HEX)
f.dmalen = ProtoField.uint32("mrcnic.reth.dmalen", "DMA Length", base.DEC)
f.imm = ProtoField.uint32("mrcnic.imm", "Immediate data", base.HEX)
f.payload = ProtoField.bytes("mrcnic.payload", "Payload")
f.pad = ProtoField.bytes("mrcnic.pad", "Pad")
-- AETH (4)
f.syndrome = ProtoField.uint8("mrcnic.aeth.syndrome", "Syndrome", base.HEX, SYNDROMES)
f.msn = ProtoField.uint24("mrcnic.aeth.msn", "MSN", base.DEC)
-- MRC SACK extension (20)
f.sack_ev = ProtoField.uint32("mrcnic.sack.ev", "Echoed EV", base.HEX)
f.sack_flags = ProtoField.uint8("mrcnic.sack.flags", "Flags", base.HEX)
f.sack_ecn = ProtoField.uint8("mrcnic.sack.flags.ecn_echo", "ECN_ECHO", base.DEC, nil, 0x01)
f.sack_trim = ProtoField.uint8("mrcnic.sack.flags.trim_nack", "TRIM_NACK", base.DEC, nil, 0x02)
f.sack_probe = ProtoField.uint8("mrcnic.sack.flags.probe_reply", "PROBE_REPLY", base.DEC, nil, 0x04)
f.sack_base = ProtoField.uint24("mrcnic.sack.base_psn", "SACK base PSN", base.DEC)
f.sack_bitmap = ProtoField.uint64("mrcnic.sack.bitmap", "SACK bitmap", base.HEX)
f.sack_ts = ProtoField.uint32("mrcnic.sack.ts", "Echoed probe timestamp (ns)", base.DEC)
-- MRC probe (12)
f.probe_ev = ProtoField.uint32("mrcnic.probe.ev", "Probed EV", base.HEX)
f.probe_port = ProtoField.uint8("mrcnic.probe.port", "Port (plane)", base.DEC)
f.probe_id = ProtoField.uint16("mrcnic.probe.id", "Probe id", base.HEX)
f.probe_ts = ProtoField.uint32("mrcnic.probe.ts", "Send timestamp (ns)", base.DEC)
f.icrc = ProtoField.uint32("mrcnic.icrc", "ICRC (little-endian CRC-32, not checked)", base.HEX)

local flow_f = Field.new("ipv6.flow")
local sport_f = Field.new("udp.srcport")

local function bit_set(value, bit)
    return math.floor(value / bit) % 2 == 1
end

local function frame_ev()
    local flow, sport = flow_f(), sport_f()
    if flow == nil or sport == nil then return nil end
    return (sport.value % 0x1000) * 0x100000 + flow.value
end

function mrc.dissector(tvb, pinfo, tree)
    local len = tvb:len()
    if len < 16 then return 0 end
    pinfo.cols.protocol = "MRC"
    local root = tree:add(mrc, tvb(), "mrcnic MRC")
    local op = tvb(0, 1):uint()
    local bth = root:add(tvb(0, 12), "Base Transport Header")
    bth:add(f.opcode, tvb(0, 1))
    bth:add(f.se, tvb(1, 1)); bth:add(f.migreq, tvb(1, 1))
    bth:add(f.padcnt, tvb(1, 1)); bth:add(f.tver, tvb(1, 1))
    bth:add(f.pkey, tvb(2, 2)); bth:add(f.becn, tvb(4, 1))
    bth:add(f.dqpn, tvb(5, 3)); bth:add(f.ackreq, tvb(8, 1)); bth:add(f.psn, tvb(9, 3))
    local psn = tvb(9, 3):uint()
    local dqpn = tvb(5, 3):uint()
    local ev = frame_ev()
    local kind, info

    if op == 0x0A or op == 0x0B then
        local hdr = (op == 0x0B) and 32 or 28
        local reth = root:add(tvb(12, 16), "RDMA Extended Transport Header")
        reth:add(f.va, tvb(12, 8)); reth:add(f.rkey, tvb(20, 4)); reth:add(f.dmalen, tvb(24, 4))
        local dmalen = tvb(24, 4):uint()
        if op == 0x0B and len >= 32 then root:add(f.imm, tvb(28, 4)) end
        local trimmed = (len == hdr + 4 and dmalen > 0)
        if ev ~= nil then root:add(f.ev, ev):set_generated() end
        root:add(f.trimmed, trimmed):set_generated()
        if trimmed then
            kind = "trimmed data"
            root:add(tvb(hdr, 4), "ICRC slot: zero (a trimmed frame carries no valid ICRC)")
            info = string.format("MRC trimmed WRITE psn=%d qp=0x%x dmalen=%d (payload cut)",
                                 psn, dqpn, dmalen)
        else
            kind = "data"
            local padcnt = math.floor(tvb(1, 1):uint() / 16) % 4
            local plen = len - hdr - padcnt - 4
            if plen > 0 then root:add(f.payload, tvb(hdr, plen)) end
            if padcnt > 0 then root:add(f.pad, tvb(hdr + plen, padcnt)) end
            root:add_le(f.icrc, tvb(len - 4, 4))
            info = string.format("MRC WRITE psn=%d qp=0x%x len=%d", psn, dqpn, dmalen)
        end
        if ev ~= nil then info = info .. string.format(" ev=0x%x", ev) end
    elseif op == 0x11 and len >= 12 + 4 + 20 then
        local aeth = root:add(tvb(12, 4), "ACK Extended Transport Header")
        aeth:add(f.syndrome, tvb(12, 1)); aeth:add(f.msn, tvb(13, 3))
        local s = root:add(tvb(16, 20), "MRC SACK extension")
        s:add(f.sack_ev, tvb(16, 4))
        local fl = s:add(f.sack_flags, tvb(20, 1))
        fl:add(f.sack_ecn, tvb(20, 1)); fl:add(f.sack_trim, tvb(20, 1)); fl:add(f.sack_probe, tvb(20, 1))
        s:add(f.sack_base, tvb(21, 3)); s:add(f.sack_bitmap, tvb(24, 8)); s:add(f.sack_ts, tvb(32, 4))
        if len >= 40 then root:add_le(f.icrc, tvb(36, 4)) end
        local flags = tvb(20, 1):uint()
        local sev, base = tvb(16, 4):uint(), tvb(21, 3):uint()
        if bit_set(flags, 2) then
            kind = "trim NACK"
            info = string.format("MRC trim NACK psn=%d ev=0x%x (retransmit now)", base, sev)
        elseif bit_set(flags, 4) then
            kind = "probe reply"
            info = string.format("MRC probe reply ev=0x%x ts=%d", sev, tvb(32, 4):uint())
        else
            kind = "SACK"
            info = string.format("MRC SACK cum_psn=%d base=%d bitmap=0x%s ev=0x%x", psn, base,
                                 tostring(tvb(24, 8):bytes():tohex()), sev)
        end
        if bit_set(flags, 1) then
            kind = kind .. " ECN-echo"
            info = info .. " ECN-echo"
        end
    elseif op == 0xC0 and len >= 12 + 12 then
        local p = root:add(tvb(12, 12), "MRC EV probe")
        p:add(f.probe_ev, tvb(12, 4)); p:add(f.probe_port, tvb(16, 1))
        p:add(f.probe_id, tvb(18, 2)); p:add(f.probe_ts, tvb(20, 4))
        if len >= 28 then root:add_le(f.icrc, tvb(24, 4)) end
        if ev ~= nil then root:add(f.ev, ev):set_generated() end
        kind = "probe"
        info = string.format("MRC probe ev=0x%x port=%d id=0x%x", tvb(12, 4):uint(),
                             tvb(16, 1):uint(), tvb(18, 2):uint())
    else
        kind = "other"
        info = string.format("RoCEv2 OpCode 0x%02x (not an mrcnic frame)", op)
    end
    root:add(f.kind, kind):set_generated()
    root:append_text(": " .. kind)
    pinfo.cols.info = info
    return len
end

DissectorTable.get("udp.port"):add(4791, mrc)
