//! [`StartupRepr`]: the meaning of a startup frame, parsed from and emitted into a
//! [`StartupFrame`] so that the startup state machines never touch raw octets.

use super::{
    field, flags, FrameKind, Rev2Params, StartupFrame, StartupFrameError, ENHANCED_LEN, HEADER_LEN,
    MAX_PRIVATE_DATA,
};

/// The meaning of a startup frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupRepr<'a> {
    /// Request or Reply.
    pub kind: FrameKind,
    /// M: the sender requires markers in the FPDUs it receives.
    pub markers: bool,
    /// C: the sender prefers CRCs (CRCs are used iff either frame has C=1).
    pub crc: bool,
    /// R: the Reply rejects the connection. Always false for a Request (R is not checked
    /// there, RFC 5044 §7.1.1) and never emitted in one.
    pub rejected: bool,
    /// Rev.
    pub rev: u8,
    /// The enhanced data (S=1, revision 2 or higher; RFC 6581 §6).
    pub enhanced: Option<Rev2Params>,
    /// The ULP private data: after the enhanced data when there is some.
    pub private_data: &'a [u8],
}

impl<'a> StartupRepr<'a> {
    /// Parses a frame of either kind.
    ///
    /// Checks the length, the key, PD_Length ≤ 512 and the revision (0, 1 and 2 are
    /// understood). R is ignored in a Request and Res is never checked (RFC 5044 §7.1.1).
    /// S is a Res bit below revision 2 and is then ignored as well.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        frame: &StartupFrame<&'a T>,
    ) -> Result<Self, StartupFrameError> {
        frame.check_len()?;
        let buf: &'a [u8] = frame.buffer.as_ref();
        let key = frame.key();
        // RFC 5044 §7.1.1 Key, §7.1.2 rule 5: receivers MUST check the key.
        let kind = FrameKind::from_key(&key).ok_or(StartupFrameError::UnknownKey { found: key })?;
        let rev = frame.rev();
        // RFC 5044 §7.1.1 Rev: receivers MUST check it; we understand 0 (RDMA Consortium,
        // Appendix C), 1 (RFC 5044) and 2 (RFC 6581).
        if rev > 2 {
            return Err(StartupFrameError::UnsupportedRevision(rev));
        }
        let pd = buf
            .get(field::PRIVATE_DATA..frame.frame_len())
            .unwrap_or(&[]);
        let (enhanced, private_data) = if rev >= 2 && frame.s() {
            // RFC 6581 §6: with S=1 the private data MUST begin with the enhanced data.
            match (pd.get(..ENHANCED_LEN), pd.get(ENHANCED_LEN..)) {
                (Some(&[a, b, c, d]), Some(rest)) => {
                    (Some(Rev2Params::from_bytes([a, b, c, d])), rest)
                }
                _ => return Err(StartupFrameError::EnhancedTooShort(frame.pd_length())),
            }
        } else {
            (None, pd)
        };
        Ok(StartupRepr {
            kind,
            markers: frame.m(),
            crc: frame.c(),
            // RFC 5044 §7.1.1 R: set to zero and not checked on reception in a Request.
            rejected: kind == FrameKind::Reply && frame.r(),
            rev,
            enhanced,
            private_data,
        })
    }

    /// Parses a frame that must be of kind `expected`: a valid key of the other kind gives
    /// [`StartupFrameError::UnexpectedKind`] (RFC 5044 §7.1.2 rule 8).
    pub fn parse_expected<T: AsRef<[u8]> + ?Sized>(
        frame: &StartupFrame<&'a T>,
        expected: FrameKind,
    ) -> Result<Self, StartupFrameError> {
        let repr = Self::parse(frame)?;
        if repr.kind != expected {
            return Err(StartupFrameError::UnexpectedKind {
                expected,
                found: repr.kind,
            });
        }
        Ok(repr)
    }

    /// PD_Length of the emitted frame.
    pub fn pd_length(&self) -> usize {
        self.private_data.len()
            + if self.enhanced.is_some() {
                ENHANCED_LEN
            } else {
                0
            }
    }

    /// Octets of the emitted frame.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.pd_length()
    }

    /// Checks the repr can be emitted: PD_Length ≤ 512, enhanced data only with revision 2 or
    /// higher, IRD and ORD within 14 bits.
    pub fn check(&self) -> Result<(), StartupFrameError> {
        if let Some(e) = &self.enhanced {
            if self.rev < 2 {
                return Err(StartupFrameError::EnhancedNeedsRev2(self.rev));
            }
            e.check()?;
        }
        let max = MAX_PRIVATE_DATA
            - if self.enhanced.is_some() {
                ENHANCED_LEN
            } else {
                0
            };
        if self.private_data.len() > max {
            return Err(StartupFrameError::PrivateDataTooLong {
                len: self.private_data.len(),
                max,
            });
        }
        Ok(())
    }

    /// Writes the frame at the start of `frame`'s buffer (Res zero, R only in a rejecting
    /// Reply, S iff enhanced) and returns its length.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        frame: &mut StartupFrame<T>,
    ) -> Result<usize, StartupFrameError> {
        self.check()?;
        let need = self.buffer_len();
        let have = frame.buffer.as_ref().len();
        if have < need {
            return Err(StartupFrameError::BufferTooShort { need, have });
        }
        frame.set_key(self.kind.key());
        let mut f = 0;
        if self.markers {
            f |= flags::M;
        }
        if self.crc {
            f |= flags::C;
        }
        // RFC 5044 §7.1.1 R: zero in a Request.
        if self.rejected && self.kind == FrameKind::Reply {
            f |= flags::R;
        }
        if self.enhanced.is_some() {
            f |= flags::S;
        }
        // RFC 5044 §7.1.1 Res: MUST be zero when sending.
        frame.set_flags(f);
        frame.set_rev(self.rev);
        // check() bounds the length by 512.
        frame.set_pd_length(u16::try_from(self.pd_length()).unwrap_or(u16::MAX));
        let pd = frame.private_data_mut();
        let ulp = match &self.enhanced {
            Some(e) => {
                if let Some(o) = pd.get_mut(..ENHANCED_LEN) {
                    o.copy_from_slice(&e.to_bytes());
                }
                pd.get_mut(ENHANCED_LEN..).unwrap_or(&mut [])
            }
            None => pd,
        };
        if let Some(o) = ulp.get_mut(..self.private_data.len()) {
            o.copy_from_slice(self.private_data);
        }
        Ok(need)
    }

    /// The frame as a new vector.
    pub fn to_bytes(&self) -> Result<Vec<u8>, StartupFrameError> {
        self.check()?;
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut StartupFrame::new_unchecked(&mut v[..]))?;
        Ok(v)
    }
}
